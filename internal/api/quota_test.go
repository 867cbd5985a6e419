package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/quota"
)

// fillTo leaves free bytes under a server's limit of limitMB: one sparse
// file whose size (which is what counts) takes the rest. The ledger is
// made stale so the next write measures it.
func (h *harness) fillTo(id, root string, limitMB int, free int64) {
	h.t.Helper()
	used, err := quota.Usage(root)
	if err != nil {
		h.t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "fill.bin"))
	if err != nil {
		h.t.Fatal(err)
	}
	// fill.bin costs its size (a multiple of the block).
	size := int64(limitMB)<<20 - used - free
	size -= size % quota.BlockSize
	if err := f.Truncate(size); err != nil {
		h.t.Fatal(err)
	}
	f.Close()
	h.srv.deps.Servers.DiskChanged(id)
}

// TestQuotaExactUnderConcurrency: writes, copies, extractions and remote
// downloads racing into one server never pass its limit together, and
// what they leave on disk is what the ledger says (api.md §4: the limit is
// on bytes written, by every writer).
func TestQuotaExactUnderConcurrency(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	const mib = 1 << 20
	blob := strings.Repeat("k", mib-100) // one file of 256 blocks
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(blob)) // no Content-Length: only the ledger can stop it
	}))
	t.Cleanup(up.Close)
	// A source for copies and an archive for extractions, made before the
	// fill.
	if st, body := h.files("POST", id, "write?file=/src/one.bin", blob, "Content-Type", "text/plain"); st != 200 {
		t.Fatalf("write: %d %s", st, body)
	}
	st, body := h.files("POST", id, "compress", map[string]any{"root": "/src", "files": []string{"one.bin"}, "format": "tar.zst"})
	if st != 200 {
		t.Fatalf("compress: %d %s", st, body)
	}
	arch := mustJSON(body)["archive"].(map[string]any)["name"].(string)
	// Room for 4 MiB: 4 of the 16 writers below can succeed, whatever the
	// kind of each.
	h.fillTo(id, root, 1024, 4*mib+2*quota.BlockSize)

	type result struct {
		kind string
		st   int
	}
	results := make(chan result, 16)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st int
			var kind string
			switch i % 4 {
			case 0:
				kind = "write"
				st, _ = h.files("POST", id, fmt.Sprintf("write?file=/w/%d.bin", i), blob, "Content-Type", "text/plain")
			case 1:
				kind = "copy"
				st, _ = h.files("POST", id, "copy", map[string]string{"location": "/src/one.bin"})
			case 2:
				// Replaces /src/one.bin: held in full while both copies
				// exist, measured again after.
				kind = "decompress"
				st, _ = h.files("POST", id, "decompress", map[string]string{"root": "/src", "file": arch})
			case 3:
				kind = "pull"
				var body []byte
				st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + fmt.Sprintf("/p%d.bin", i), "directory": "/p"})
				if st == 202 {
					dl := mustJSON(body)["download"].(map[string]any)["identifier"].(string)
					if got := h.waitDownload(id, dl); got["status"] == "done" {
						st = 200
					} else {
						st = 507
					}
				}
			}
			results <- result{kind, st}
		}()
	}
	wg.Wait()
	close(results)
	ok := 0
	for r := range results {
		switch r.st {
		case 200:
			ok++
		case 507, 409, 400:
		default:
			t.Errorf("%s answered %d", r.kind, r.st)
		}
	}
	// What is on disk never passes the limit, and is what the ledger holds
	// once measured again.
	used, err := quota.Usage(root)
	if err != nil {
		t.Fatal(err)
	}
	if used > 1024*mib {
		t.Errorf("after 16 racing writers the root holds %d bytes, over the 1 GiB limit by %d", used, used-1024*mib)
	}
	if ok == 0 || ok == 16 {
		t.Errorf("%d of 16 writers of 1 MiB succeeded with 4 MiB free", ok)
	}
	st, body = h.files("POST", id, "write?file=/last.bin", blob, "Content-Type", "text/plain")
	if used+quota.Cost(int64(len(blob))) > 1024*mib && st != 507 {
		t.Errorf("a write past what the racers left = %d %s, want 507", st, body)
	}
}

// TestDiskFullIs507: a host disk that is full (ENOSPC) answers 507 like
// the limit, and leaves nothing behind. The server's root is a 1 MiB tmpfs.
func TestDiskFullIs507(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: TestDiskFullIs507 needs root to mount a small tmpfs (a full host disk)")
	}
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "kiln-full", root).CombinedOutput(); err != nil {
		t.Skipf("SKIP: TestDiskFullIs507 cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })
	h.srv.deps.Servers.DiskChanged(id)
	st, body := h.files("POST", id, "write?file=/big.bin", strings.Repeat("x", 2<<20), "Content-Type", "text/plain")
	wantError(t, st, body, 507, "QUOTA_EXCEEDED", "host's disk is full")
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		t.Errorf("left behind on the full disk: %s", e.Name())
	}
}
