package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// treeHash is every regular file under root (but Kiln's own temporaries)
// with its SHA-256, one line each, sorted: two trees are equal when their
// hashes are.
func treeHash(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".kiln-tmp-") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(root, p)
		lines = append(lines, rel+" "+hex.EncodeToString(sum[:]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// fillRandom writes n files of size random bytes under root/dir.
func fillRandom(t *testing.T, root, dir string, n, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	for i := range n {
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(root, dir, "r."+strings.Repeat("x", i%3)+hex.EncodeToString([]byte{byte(i)})+".mca"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSnap polls a snapshot until cond holds.
func waitSnap(t *testing.T, addr, token, id, what string, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var snap map[string]any
	for time.Now().Before(deadline) {
		code, out := call(t, addr, token, "GET", "/snapshots/"+id, "")
		if code != 200 {
			t.Fatalf("GET snapshot: %d %v", code, out)
		}
		snap = out["snapshot"].(map[string]any)
		if cond(snap) {
			return snap
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("snapshot %s never %s: %v", id, what, snap)
	return nil
}

// storedChunks lists the chunk blobs of the data dir's store.
func storedChunks(t *testing.T, dir string) []string {
	t.Helper()
	st, err := blob.Open(t.Context(), "file://"+filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := st.List(t.Context(), "chunks/", func(in blob.Info) error { keys = append(keys, in.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// referenced is every chunk the manifests of the snapshots uuids name.
func referenced(t *testing.T, dir string, uuids ...string) []string {
	t.Helper()
	st, err := blob.Open(t.Context(), "file://"+filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range uuids {
		k, err := engine.ChunkKeys(t.Context(), st, manifest.Key(u))
		if err != nil {
			t.Fatalf("manifest of %s: %v", u, err)
		}
		keys = append(keys, k...)
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

// TestSnapshotsSurviveKillNine kills a real kiln serve with SIGKILL
// during a snapshot's creation, during a delete, during a restore and
// during the download of a snapshot deleted under it, and starts it again
// each time: the snapshot being taken is failed and what it stored is
// collected; every ready snapshot's chunks are all there and no other
// chunk is (the dead download holds none); the restored server's files
// are the old tree or the snapshot's, never a mix; a restore after the
// restart succeeds.
func TestSnapshotsSurviveKillNine(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	args := []string{"--data-dir", dir, "--dev", "--port-range", ports.String(), "--rate-limit", "1000000"}
	p := startServe(t, args...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"world","software":"kiln-test","memory_mb":256,"disk_mb":4096}`)
	if code != 202 {
		t.Fatalf("create server: %d %v", code, out)
	}
	id := out["server"].(map[string]any)["id"].(string)
	waitServer(t, p.addr, token, id, "offline")
	root := filepath.Join(dir, "servers", id)
	fillRandom(t, root, "region", 48, 2<<20) // 96 MiB that does not compress

	snapshotOf := func(p *proc, name string) string {
		t.Helper()
		code, out := call(t, p.addr, token, "POST", "/snapshots", `{"source_server_id":"`+id+`","name":"`+name+`"}`)
		if code != 202 {
			t.Fatalf("create snapshot: %d %v", code, out)
		}
		return out["snapshot_id"].(string)
	}
	ready := func(s map[string]any) bool { return s["status"] == "ready" || s["status"] == "failed" }

	// A: a full snapshot, kept throughout.
	aID := snapshotOf(p, "a")
	a := waitSnap(t, p.addr, token, aID, "ready", ready)
	if a["status"] != "ready" {
		t.Fatalf("snapshot a = %v", a)
	}
	aUUID := a["snapshot_uuid"].(string)
	aTree := treeHash(t, root)

	// 1. Killed while B is being taken.
	fillRandom(t, root, "region2", 24, 2<<20)
	bID := snapshotOf(p, "b")
	waitSnap(t, p.addr, token, bID, "creating", func(s map[string]any) bool { return s["status"] == "creating" && s["bytes_done"].(float64) > 0 })
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = startServe(t, args...)
	b := waitSnap(t, p.addr, token, bID, "failed", ready)
	if b["status"] != "failed" || !strings.Contains(b["error"].(string), "stopped while the snapshot was being taken") {
		t.Errorf("snapshot b after the kill = %v; want failed", b)
	}
	if got, want := storedChunks(t, dir), referenced(t, dir, aUUID); !slices.Equal(got, want) {
		t.Errorf("after a kill during a create: %d chunks stored, a references %d (a missing or a leaked chunk)", len(got), len(want))
	}
	if err := os.RemoveAll(filepath.Join(root, "region2")); err != nil {
		t.Fatal(err)
	}

	// 2. Killed during the delete of C (sharing most chunks with A).
	fillRandom(t, root, "extra", 4, 2<<20)
	cID := snapshotOf(p, "c")
	c := waitSnap(t, p.addr, token, cID, "ready", ready)
	go func() {
		req, _ := http.NewRequest("DELETE", "http://"+p.addr+"/api/client/v1/snapshots/"+cID, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(3 * time.Millisecond)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = startServe(t, args...)
	keep := []string{aUUID}
	if code, _ := call(t, p.addr, token, "GET", "/snapshots/"+cID, ""); code == 200 {
		keep = append(keep, c["snapshot_uuid"].(string)) // the kill came before the record went
	}
	// The collector runs at start; give it a moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, want := storedChunks(t, dir), referenced(t, dir, keep...)
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a kill during a delete: %d chunks stored, the snapshots kept reference %d", len(got), len(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.RemoveAll(filepath.Join(root, "extra")); err != nil {
		t.Fatal(err)
	}

	// 3. Killed during a restore of A over a changed tree.
	fillRandom(t, root, "region", 48, 2<<20) // every region file changed
	changed := treeHash(t, root)
	code, out = call(t, p.addr, token, "POST", "/snapshots/"+aID+"/restore", "")
	if code != 202 {
		t.Fatalf("restore: %d %v", code, out)
	}
	// Kill once the restore has begun staging.
	deadline = time.Now().Add(30 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(root, ".kiln-tmp-restore-*"))
		if len(m) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = startServe(t, args...)
	switch now := treeHash(t, root); now {
	case aTree, changed:
	default:
		t.Errorf("after a kill during a restore the tree is neither the old one nor the snapshot's")
	}
	if m, _ := filepath.Glob(filepath.Join(root, ".kiln-tmp-*")); len(m) != 0 {
		t.Errorf("leftovers in the root after the restart: %v", m)
	}
	// A restore after the restart succeeds.
	code, out = call(t, p.addr, token, "POST", "/snapshots/"+aID+"/restore", "")
	if code != 202 {
		t.Fatalf("restore again: %d %v", code, out)
	}
	deadline = time.Now().Add(60 * time.Second)
	for treeHash(t, root) != aTree {
		if time.Now().After(deadline) {
			t.Fatal("the restore after the restart did not make the tree equal to snapshot a")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// 4. Killed during the download of D, deleted under it (its storage
	// left to the download: reason in_use): once started again, the dead
	// download holds nothing and D's own chunks are collected.
	fillRandom(t, root, "download", 8, 2<<20)
	dID := snapshotOf(p, "d")
	if d := waitSnap(t, p.addr, token, dID, "ready", ready); d["status"] != "ready" {
		t.Fatalf("snapshot d = %v", d)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+p.addr+"/api/client/v1/snapshots/"+dID+"/download?format=tar", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("download d: %v %v", resp, err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil { // then read no more: the download waits
		t.Fatal(err)
	}
	code, out = call(t, p.addr, token, "DELETE", "/snapshots/"+dID, "")
	if code != 200 || out["storage_cleanup_reason"] != "in_use" || out["storage_deleted"] != false {
		t.Fatalf("delete d during its download: %d %v", code, out)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	resp.Body.Close()
	p = startServe(t, args...)
	deadline = time.Now().Add(30 * time.Second)
	for {
		got, want := storedChunks(t, dir), referenced(t, dir, aUUID)
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a kill during the download of a deleted snapshot: %d chunks stored, a references %d", len(got), len(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p.Stderr())
	}
}

// flipByte flips one bit in the middle of the file at path, in place.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAdminSnapshotsCheck: kiln admin snapshots check, run beside kiln
// serve, names the snapshots whose manifest is gone (by id, team, server
// and name) and exits 1; with --read-data it also reads every chunk,
// finds the one corrupted on disk, names the two snapshots sharing it and
// moves it to quarantine/; the API then shows them damaged and refuses
// their restore (409 SNAPSHOT_DAMAGED). A new snapshot of the server
// stores the chunk again and restores the files byte for byte; the next
// check finds the two whole again; once the snapshot without a manifest
// is deleted, it finds nothing and exits 0.
func TestAdminSnapshotsCheck(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 3)
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports.String(), "--rate-limit", "1000000")
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	server := func(name string) (string, string) {
		code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"`+name+`","software":"kiln-test","memory_mb":256,"disk_mb":1024}`)
		if code != 202 {
			t.Fatalf("create server: %d %v", code, out)
		}
		id := out["server"].(map[string]any)["id"].(string)
		waitServer(t, p.addr, token, id, "offline")
		return id, filepath.Join(dir, "servers", id)
	}
	ready := func(s map[string]any) bool { return s["status"] == "ready" || s["status"] == "failed" }
	snapshot := func(serverID, name string) map[string]any {
		code, out := call(t, p.addr, token, "POST", "/snapshots", `{"source_server_id":"`+serverID+`","name":"`+name+`"}`)
		if code != 202 {
			t.Fatalf("create snapshot: %d %v", code, out)
		}
		s := waitSnap(t, p.addr, token, out["snapshot_id"].(string), "ready", ready)
		if s["status"] != "ready" || s["damage"] != nil {
			t.Fatalf("snapshot %s = %v", name, s)
		}
		return s
	}
	world, root := server("world")
	fillRandom(t, root, "region", 3, 2<<20)
	tree := treeHash(t, root)
	a := snapshot(world, "nightly a")
	b := snapshot(world, "nightly b") // the same chunks as a
	lobby, _ := server("lobby")
	c := snapshot(lobby, "before")
	if err := os.Remove(filepath.Join(dir, "blobs", "manifests", c["snapshot_uuid"].(string))); err != nil {
		t.Fatal(err)
	}
	chunks := referenced(t, dir, a["snapshot_uuid"].(string))
	bad := chunks[0]
	flipByte(t, filepath.Join(dir, "blobs", filepath.FromSlash(bad)))

	// line is a row of the report's table as the check prints it, its
	// columns apart by two spaces or more (tabwriter).
	cols := regexp.MustCompile(`\s{2,}`)
	line := func(s map[string]any, server, problem string) string {
		return fmt.Sprintf("%s|default|%s|%q|%s", s["snapshot_id"], server, s["name"], problem)
	}
	table := func(out string) string { return cols.ReplaceAllString(out, "|") }
	out, errOut, code := kiln(t, "admin", "snapshots", "check", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "checked 3 ready snapshot(s)") || !strings.Contains(out, "1 damaged snapshot(s):") ||
		!strings.Contains(table(out), line(c, lobby, "manifest missing")) || strings.Contains(out, a["snapshot_id"].(string)) ||
		!strings.Contains(errOut, "kiln: 1 damaged snapshot(s)") {
		t.Fatalf("check = exit %d\n%s%s\nwant exit 1 naming %s only", code, out, errOut, c["snapshot_id"])
	}

	out, errOut, code = kiln(t, "admin", "snapshots", "check", "--data-dir", dir, "--read-data")
	if code != 1 || !strings.Contains(out, "3 damaged snapshot(s):") || !strings.Contains(table(out), line(a, world, "0 chunk(s) missing, 1 corrupt")) ||
		!strings.Contains(table(out), line(b, world, "0 chunk(s) missing, 1 corrupt")) || !strings.Contains(table(out), line(c, lobby, "manifest missing")) ||
		!strings.Contains(out, "  "+bad+" -> quarantine/"+bad+".") {
		t.Fatalf("check --read-data = exit %d\n%s%s\nwant a, b (the corrupt chunk, moved aside) and c", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", filepath.FromSlash(bad))); !os.IsNotExist(err) {
		t.Errorf("the corrupt chunk is still in chunks/: %v", err)
	}
	code, got := call(t, p.addr, token, "GET", "/snapshots/"+a["snapshot_id"].(string), "")
	if damage, _ := got["snapshot"].(map[string]any)["damage"].(string); code != 200 || !strings.HasPrefix(damage, "Data it holds is missing") {
		t.Errorf("snapshot a in the API = %d %v; want its damage", code, got)
	}
	code, got = call(t, p.addr, token, "POST", "/snapshots/"+a["snapshot_id"].(string)+"/restore", "")
	if code != 409 || got["code"] != "SNAPSHOT_DAMAGED" || !strings.HasPrefix(got["error"].(string), "the snapshot is damaged: data it holds") {
		t.Errorf("restore of a = %d %v; want 409 SNAPSHOT_DAMAGED", code, got)
	}

	// The same files again: the new snapshot stores the chunk anew.
	d := snapshot(world, "after")
	fillRandom(t, root, "region", 3, 1<<20) // griefed
	code, got = call(t, p.addr, token, "POST", "/snapshots/"+d["snapshot_id"].(string)+"/restore", "")
	if code != 202 {
		t.Fatalf("restore of d = %d %v", code, got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for treeHash(t, root) != tree {
		if time.Now().After(deadline) {
			t.Fatal("the restore of the snapshot taken after the check did not bring the files back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, errOut, code = kiln(t, "admin", "snapshots", "check", "--data-dir", dir, "--read-data")
	if code != 1 || !strings.Contains(out, "2 snapshot(s) marked damaged before are whole again (unmarked)") ||
		!strings.Contains(out, "1 damaged snapshot(s):") || !strings.Contains(table(out), line(c, lobby, "manifest missing")) {
		t.Fatalf("check after the new snapshot = exit %d\n%s%s\nwant a and b whole, c damaged", code, out, errOut)
	}
	if code, out := call(t, p.addr, token, "DELETE", "/snapshots/"+c["snapshot_id"].(string), ""); code != 200 {
		t.Fatalf("delete c: %d %v", code, out)
	}
	out, errOut, code = kiln(t, "admin", "snapshots", "check", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "checked 3 ready snapshot(s)") || !strings.Contains(out, "no damage found") {
		t.Errorf("check once c is deleted = exit %d\n%s%s\nwant exit 0", code, out, errOut)
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("stop: %v\n%s", err, p.Stderr())
	}
}
