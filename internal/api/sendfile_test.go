package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

// readFromCounter is the writer net/http gives a handler, seen from
// outside: it counts the bytes that reach it through ReadFrom, the path
// on which net/http sends a file with sendfile(2).
type readFromCounter struct {
	http.ResponseWriter
	viaReadFrom atomic.Int64
}

func (w *readFromCounter) ReadFrom(src io.Reader) (int64, error) {
	n, err := w.ResponseWriter.(io.ReaderFrom).ReadFrom(src)
	w.viaReadFrom.Add(n)
	return n, err
}

func (w *readFromCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestDownloadReachesSendfile: a file's download reaches net/http's
// ReadFrom through the API's writers (status, deadlines), so the kernel
// sends the file (sendfile) instead of Kiln reading and writing it 32 KiB
// at a time (issue 33: neither writer passed ReadFrom); the bytes and the
// access log's size are still right.
func TestDownloadReachesSendfile(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	want := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16+3) // 5 MiB and 48 B: several transfer steps and a short last one
	if err := os.WriteFile(filepath.Join(root, "world.bin"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	var counted *readFromCounter
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counted = &readFromCounter{ResponseWriter: w}
		h.srv.ServeHTTP(counted, r)
	}))
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+Prefix+"/servers/"+id+"/files/download?file=/world.bin", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("download: %d, %d bytes (%v); want 200 and the %d bytes of the file", resp.StatusCode, len(got), err, len(want))
	}
	if n := counted.viaReadFrom.Load(); n != int64(len(want)) {
		t.Errorf("%d bytes reached net/http through ReadFrom, want all %d", n, len(want))
	}
	if !bytes.Contains([]byte(h.logs.String()), []byte("bytes="+strconv.Itoa(len(want)))) {
		t.Errorf("the access log does not say bytes=%d:\n%s", len(want), h.logs.String())
	}
}
