package api

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/netguard/netguardtest"
)

// waitDownload polls the list until the download is no longer active.
func (h *harness) waitDownload(id, dl string) map[string]any {
	h.t.Helper()
	return eventually.Value(h.t, eventually.Within, "download "+dl+" finished", func() (map[string]any, bool, string) {
		st, body := h.files("GET", id, "pull", nil)
		if st != 200 {
			h.t.Fatalf("list downloads: %d %s", st, body)
		}
		for _, d := range mustJSON(body)["downloads"].([]any) {
			d := d.(map[string]any)
			if d["identifier"] == dl && d["status"] != "queued" && d["status"] != "running" {
				return d, true, ""
			}
		}
		return nil, false, string(body)
	})
}

func TestPullDownloads(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	jar := strings.Repeat("plugin bytes ", 10000)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/Hello.jar":
			w.Header().Set("Content-Length", fmt.Sprint(len(jar)))
			w.Write([]byte(jar))
		case "/slow.jar":
			w.Header().Set("Content-Length", "1000000")
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })

	st, body := h.files("POST", id, "pull", map[string]string{"url": up.URL + "/Hello.jar", "directory": "/plugins"})
	if st != 202 {
		t.Fatalf("pull: %d %s", st, body)
	}
	dl := mustJSON(body)["download"].(map[string]any)
	if !strings.HasPrefix(dl["identifier"].(string), "dl_") || dl["file"] != "/plugins/Hello.jar" || dl["error"] != nil {
		t.Errorf("download = %v", dl)
	}
	done := h.waitDownload(id, dl["identifier"].(string))
	if done["status"] != "done" || done["progress"] != 100.0 || done["size"] != float64(len(jar)) || done["error"] != nil {
		t.Errorf("finished download = %v", done)
	}
	if b, err := os.ReadFile(filepath.Join(root, "plugins", "Hello.jar")); err != nil || string(b) != jar {
		t.Errorf("downloaded file: %d bytes, %v", len(b), err)
	}

	// 404 upstream: failed, with the reason.
	st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/missing.jar"})
	if st != 202 {
		t.Fatalf("pull missing: %d %s", st, body)
	}
	failed := h.waitDownload(id, mustJSON(body)["download"].(map[string]any)["identifier"].(string))
	if failed["status"] != "failed" || !strings.Contains(fmt.Sprint(failed["error"]), "404") {
		t.Errorf("404 download = %v", failed)
	}

	// Cancel mid-transfer removes the partial file.
	st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/slow.jar", "directory": "/mods"})
	if st != 202 {
		t.Fatalf("pull slow: %d %s", st, body)
	}
	slow := mustJSON(body)["download"].(map[string]any)["identifier"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(root, "mods", ".kiln-tmp-"+slow+"-*")); len(m) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow download never started writing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, body = h.files("DELETE", id, "pull/"+slow, nil); st != 200 {
		t.Fatalf("cancel: %d %s", st, body)
	}
	if c := h.waitDownload(id, slow); c["status"] != "canceled" {
		t.Errorf("canceled download = %v", c)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "mods")); len(ents) != 0 {
		t.Errorf("mods/ holds %d entries after a cancel, want none", len(ents))
	}

	st, body = h.files("DELETE", id, "pull/dl_nope", nil)
	wantError(t, st, body, 404, "DOWNLOAD_NOT_FOUND", "not found")
	st, body = h.files("POST", id, "pull", map[string]string{"url": "ftp://x/y"})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "url")
	st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/x.jar", "directory": "/../etc"})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "..")
	st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/x.jar", "filename": "../x"})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "filename")

	// At most 3 active per server.
	for i := range 3 {
		if st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/slow.jar", "filename": fmt.Sprintf("s%d.jar", i)}); st != 202 {
			t.Fatalf("pull %d: %d %s", i, st, body)
		}
	}
	st, body = h.files("POST", id, "pull", map[string]string{"url": up.URL + "/slow.jar", "filename": "s4.jar"})
	wantError(t, st, body, 409, "CONFLICT", "active downloads")
}

// TestPullSSRF: with only 127.0.0.1/32 allowed, every other local address
// is refused before any connection, directly, through a name, through a
// redirect and in its IPv6 forms; the refusal says why.
func TestPullSSRF(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, _ := h.fileServer(1024)
	r2 := netguardtest.Listen(t, "127.0.0.2:0")
	r3 := netguardtest.Listen(t, "127.0.0.3:"+fmt.Sprint(r2.Port()))
	r1 := netguardtest.Listen(t, "127.0.0.1:0") // the allowed address, reached only in forbidden spellings
	redirector := httptest.NewServer(http.RedirectHandler(fmt.Sprintf("http://127.0.0.2:%d/x.jar", r2.Port()), http.StatusFound))
	t.Cleanup(redirector.Close)
	cases := []struct{ name, url, want string }{
		{"127.0.0.2", fmt.Sprintf("http://127.0.0.2:%d/x.jar", r2.Port()), "127.0.0.0/8"},
		{"0.0.0.0", fmt.Sprintf("http://0.0.0.0:%d/x.jar", r1.Port()), "0.0.0.0/8"},
		{"IPv4-mapped loopback", fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/x.jar", r1.Port()), "127.0.0.0/8"},
		{"name resolving to 127.0.0.3", fmt.Sprintf("http://evil.test:%d/x.jar", r2.Port()), "127.0.0.3"},
		{"redirect to 127.0.0.2", redirector.URL + "/go", "127.0.0.2"},
	}
	if r6 := tryListen("[::1]:0"); r6 != nil {
		defer r6.Close()
		cases = append(cases, struct{ name, url, want string }{"::1", fmt.Sprintf("http://[::1]:%d/x.jar", r6.Addr().(*net.TCPAddr).Port), "::1"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, body := h.files("POST", id, "pull", map[string]string{"url": tc.url, "filename": "x.jar"})
			if st != 202 {
				t.Fatalf("pull: %d %s", st, body)
			}
			d := h.waitDownload(id, mustJSON(body)["download"].(map[string]any)["identifier"].(string))
			msg := fmt.Sprint(d["error"])
			if d["status"] != "failed" || !strings.Contains(msg, "downloads may not reach") || !strings.Contains(msg, tc.want) {
				t.Errorf("download = %v; want failed (may not reach), naming %q", d, tc.want)
			}
		})
	}
	// Every refusal came before connecting: nothing reached the listeners.
	for _, r := range []*netguardtest.Recorder{r2, r3, r1} {
		r.AssertNoConnection(t)
	}
}

func tryListen(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil
	}
	return ln
}
