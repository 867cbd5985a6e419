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
// count them meanwhile.
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

	// Kill once all three have something in flight.
	deadline := time.Now().Add(60 * time.Second)
	var seen []string
	for {
		seen = tempEntries(t, root)
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
	left := tempEntries(t, root)
	if len(left) < 3 {
		t.Fatalf("after kill -9 only %v are left: the test did not cut the operations", left)
	}
	t.Logf("left by kill -9: %v", left)

	p2 := startServe(t, args...)
	for deadline := time.Now().Add(60 * time.Second); len(tempEntries(t, root)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("leftovers still there a minute after the restart: %v", tempEntries(t, root))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The disk figure counts what is there, not the leftovers.
	want, err := quota.Usage(root, time.Time{})
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
