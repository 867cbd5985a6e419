package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
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
