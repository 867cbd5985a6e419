package main

import (
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// tempEntries lists the ".kiln-tmp-" entries under root (root-relative).
func tempEntries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), quota.TempPrefix) {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
}

// TestLeftoversCollectedAfterKillNine kills kiln serve with SIGKILL in
// the middle of a write, a decompress and a compress of one server, then
// starts it again: the temporary files and staging trees the three left
// are removed at the next start, and the server's disk figure does not
// count them meanwhile. Look-alikes a game server wrote into its root (a
// file with Kiln's prefix, a forged restore directory whose journal
// climbs out) are not Kiln's: they are neither removed nor replayed.
func TestLeftoversCollectedAfterKillNine(t *testing.T) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	args := []string{"--data-dir", dir, "--dev", "--port-range", ports.String()}
	p := startServe(t, args...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"crashy","software":"kiln-test","memory_mb":512,"disk_mb":8192}`)
	if code != 202 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["server"].(map[string]any)["id"].(string)
	waitServer(t, p.addr, token, id, "offline")
	root := filepath.Join(dir, "servers", id)

	// Material: a 1 GiB sparse file to compress, and an archive of it to
	// extract (writing it takes seconds), made by kiln itself (a test
	// binary built with -race would take minutes to gzip it).
	const big = 1 << 30
	must0(os.MkdirAll(filepath.Join(root, "world"), 0o755))
	must0(os.MkdirAll(filepath.Join(root, "in"), 0o755))
	must0(os.Truncate(must(os.Create(filepath.Join(root, "world", "sparse.bin"))).Name(), big))
	code, out = call(t, p.addr, token, "POST", "/servers/"+id+"/files/compress", `{"root":"/world","files":["sparse.bin"]}`)
	if code != 200 {
		t.Fatalf("compress: %d %v", code, out)
	}
	name := out["archive"].(map[string]any)["name"].(string)
	if code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/files/rename",
		`{"root":"/","files":[{"from":"world/`+name+`","to":"in/zeros.tar.gz"}]}`); code != 200 {
		t.Fatalf("rename: %d %v", code, out)
	}

	send := func(method, path, body string, rd io.Reader) {
		req, _ := http.NewRequest(method, "http://"+p.addr+"/api/client/v1/servers/"+id+"/files/"+path, rd)
		if rd == nil {
			req, _ = http.NewRequest(method, "http://"+p.addr+"/api/client/v1/servers/"+id+"/files/"+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	// A write whose body stops after 1 MiB and never ends.
	pr, pw := io.Pipe()
	go send("POST", "write?file=/up/partial.bin", "", pr)
	go func() {
		pw.Write(make([]byte, 1<<20))
		<-t.Context().Done()
		pw.Close()
	}()
	go send("POST", "decompress", `{"root":"/in","file":"zeros.tar.gz"}`, nil)
	go send("POST", "compress", `{"root":"/world","files":["sparse.bin"]}`, nil)

	// What a game server can write into its own root: old look-alikes of
	// Kiln's names, one a restore directory whose journal would delete a
	// file outside the root.
	outside := filepath.Join(dir, "outside.txt")
	must0(os.WriteFile(outside, []byte("host file"), 0o600))
	forged := map[string]string{
		"world/.kiln-tmp-mine":           "a game's file",
		".kiln-tmp-restore-x/journal":    "kiln-restore-journal 2\ndel \"../../../outside.txt\"\nend 1\n",
		".kiln-tmp-restore-x/tree/keep":  "",
		".kiln-tmp-restore-x/trash/keep": "",
	}
	old := time.Now().Add(-time.Hour)
	for p, content := range forged {
		must0(os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must0(os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
		must0(os.Chtimes(filepath.Join(root, p), old, old))
	}
	must0(os.Chtimes(filepath.Join(root, ".kiln-tmp-restore-x"), old, old))
	notForged := func(list []string) (out []string) {
		for _, s := range list {
			if s != "world/.kiln-tmp-mine" && s != ".kiln-tmp-restore-x" {
				out = append(out, s)
			}
		}
		return out
	}

	// Kill once all three have something in flight.
	deadline := time.Now().Add(60 * time.Second)
	var seen []string
	for {
		seen = notForged(tempEntries(t, root))
		in := map[string]bool{}
		for _, s := range seen {
			in[strings.SplitN(s, "/", 2)[0]] = true
		}
		if in["up"] && in["in"] && in["world"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the three operations were never in flight at once; temporary entries: %v", seen)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	left := notForged(tempEntries(t, root))
	if len(left) < 3 {
		t.Fatalf("after kill -9 only %v are left: the test did not cut the operations", left)
	}
	t.Logf("left by kill -9: %v", left)

	p2 := startServe(t, args...)
	for deadline := time.Now().Add(60 * time.Second); len(notForged(tempEntries(t, root))) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("leftovers still there a minute after the restart: %v", tempEntries(t, root))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for p, content := range forged {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(got) != content {
			t.Errorf("the game's %s: %q, %v; want it left as it was", p, got, err)
		}
	}
	if got, err := os.ReadFile(outside); err != nil || string(got) != "host file" {
		t.Errorf("the file outside the root: %q, %v; want it untouched", got, err)
	}
	if !strings.Contains(p2.Stderr(), "left entries named like Kiln's restore directories") {
		t.Errorf("the start did not log the forged restore directory:\n%s", p2.Stderr())
	}
	// The disk figure counts what is there, not the leftovers.
	want, err := quota.Usage(root)
	if err != nil {
		t.Fatal(err)
	}
	sv := waitServer(t, p2.addr, token, id, "offline")
	got := int64(sv["resources"].(map[string]any)["disk_bytes"].(float64))
	if got != want {
		t.Errorf("disk_bytes after the restart = %d, want %d (the tree without leftovers)", got, want)
	}
	if err := p2.stop(os.Interrupt); err != nil {
		t.Errorf("kiln serve after SIGINT: %v\n%s", err, p2.Stderr())
	}
}

func must0(err error) {
	if err != nil {
		panic(err)
	}
}
