package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/servers"
)

// finished is a slog.Handler that counts, by route, the requests whose
// access log line is written, that is, whose handler has returned. It
// never drops one: the polls of a slow install must not crowd out the
// request a test waits for.
type finished struct {
	slog.Handler
	done *finishedRequests
}

// finishedRequests is what finished counted.
type finishedRequests struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed at the next finished request
}

func (h finished) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "request" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "route" {
				h.done.add(a.Value.String())
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h finished) WithAttrs(as []slog.Attr) slog.Handler {
	return finished{h.Handler.WithAttrs(as), h.done}
}

func (h finished) WithGroup(name string) slog.Handler {
	return finished{h.Handler.WithGroup(name), h.done}
}

func (f *finishedRequests) add(route string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[route]++
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// watchRequests makes the harness count finished requests' routes.
func watchRequests(done *finishedRequests) harnessOpt {
	return func(_ *Config, d *Deps) { d.Log = slog.New(finished{d.Log.Handler(), done}) }
}

func newFinishedRequests() *finishedRequests { return &finishedRequests{n: map[string]int{}} }

// shortLimits shortens the transfer and stream limits so that tests see
// them act (never timed: the tests wait for what happens).
func shortLimits(c *Config, _ *Deps) {
	c.TransferIdle = time.Second
	c.MinTransferRate = 8 << 20
	c.StreamHeartbeat = 20 * time.Millisecond
}

// waitFinished waits until n requests of route have finished since the
// harness started.
func waitFinished(t *testing.T, done *finishedRequests, route string, n int) {
	t.Helper()
	limit := time.After(time.Minute)
	for {
		done.mu.Lock()
		if done.n[route] >= n {
			done.mu.Unlock()
			return
		}
		if done.changed == nil {
			done.changed = make(chan struct{})
		}
		changed := done.changed
		done.mu.Unlock()
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("the handler of %s has not returned after a minute", route)
		}
	}
}

// openUnder lists the descriptors of this process open on files under
// dir.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			out = append(out, target)
		}
	}
	return out
}

// rawRequest opens a connection to the harness and sends head (a request
// line and headers, without the blank line) and the blank line.
func (h *harness) rawRequest(head string) net.Conn {
	h.t.Helper()
	u, _ := url.Parse(h.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\nHost: "+u.Host+"\r\nAuthorization: Bearer "+h.token+"\r\n\r\n"); err != nil {
		h.t.Fatal(err)
	}
	return conn
}

// TestDownloadReaderStops: a client that stops reading a download is cut
// off by the write deadline; the handler returns and the file is closed.
func TestDownloadReaderStops(t *testing.T) {
	routes := newFinishedRequests()
	h := newHarness(t, sqliteDB(t), shortLimits, watchRequests(routes))
	id, root := h.fileServer(1024)
	f, err := os.Create(filepath.Join(root, "world.bin"))
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 256 MiB, far more than the connection's buffers hold.
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	conn := h.rawRequest("GET " + Prefix + "/servers/" + id + "/files/download?file=/world.bin HTTP/1.1")
	_ = conn // never read
	waitFinished(t, routes, "GET /servers/{id}/files/download", 1)
	if open := openUnder(t, root); len(open) > 0 {
		t.Errorf("after the handler returned, still open: %q", open)
	}
}

// TestUploadTrickleIsCutOff: a client that sends a write's body far below
// the minimum rate gets 408 REQUEST_TIMEOUT; nothing is written and no
// file stays open.
func TestUploadTrickleIsCutOff(t *testing.T) {
	routes := newFinishedRequests()
	h := newHarness(t, sqliteDB(t), shortLimits, watchRequests(routes))
	id, root := h.fileServer(1024)
	conn := h.rawRequest("POST " + Prefix + "/servers/" + id + "/files/write?file=/up.bin HTTP/1.1\r\n" +
		"Content-Type: application/octet-stream\r\nContent-Length: 8388608")
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() { // one byte every 10 ms: ~100 B/s against 8 MiB/s
		defer close(trickled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	waitFinished(t, routes, "POST /servers/{id}/files/write", 1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	wantError(t, resp.StatusCode, body, http.StatusRequestTimeout, "REQUEST_TIMEOUT", "too slowly")
	if open := openUnder(t, root); len(open) > 0 {
		t.Errorf("after the handler returned, still open: %q", open)
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), "up.bin") || strings.HasPrefix(e.Name(), ".kiln-tmp") {
			t.Errorf("left behind in the root: %s", e.Name())
		}
	}
}

// stream opens the console stream of server id with token.
func (h *harness) stream(id, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(h.t.Context(), "GET", h.url+Prefix+"/servers/"+id+"/console/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return h.client.Do(req)
}

// readToEnd reads a stream's body until the server ends it (a minute at
// most).
func readToEnd(t *testing.T, resp *http.Response) string {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(resp.Body)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("read the stream: %v", r.err)
		}
		return string(r.b)
	case <-time.After(time.Minute):
		resp.Body.Close()
		t.Fatal("the stream has not ended after a minute")
		return ""
	}
}

// TestStreamEndsOnRevokedToken: revoking the token (as kiln admin does, in
// the database) ends its console streams at the next check.
func TestStreamEndsOnRevokedToken(t *testing.T) {
	h := newHarness(t, sqliteDB(t), shortLimits)
	id, _ := h.fileServer(1024)
	tok, info, err := h.auth.CreateToken(t.Context(), auth.BootstrapTeam, auth.KindUser, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.stream(id, string(tok))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if err := h.auth.RevokeToken(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if got := readToEnd(t, resp); !strings.Contains(got, ": the token was revoked") {
		t.Errorf("stream = %q, want it to end saying the token was revoked", got)
	}
}

// TestStreamEndsOnDelete: deleting the server ends its streams with a
// last status event.
func TestStreamEndsOnDelete(t *testing.T) {
	h := newHarness(t, sqliteDB(t), shortLimits)
	id, _ := h.fileServer(1024)
	resp, err := h.stream(id, h.token)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if st, _, body := h.do("DELETE", Prefix+"/servers/"+id, h.token, nil); st != 200 {
		t.Fatalf("delete: %d %s", st, body)
	}
	// It ends saying so: by the console's last status event, or — when
	// the stream's periodic check sees the row gone first — by a comment.
	if got := readToEnd(t, resp); !strings.Contains(got, "event: status\ndata: deleted\n\n") && !strings.HasSuffix(got, ": the server was deleted\n\n") {
		t.Errorf("stream = %q, want it to end saying the server was deleted", got)
	}
}

// TestStreamMaxLife: a stream ends at StreamMaxLife, saying so.
func TestStreamMaxLife(t *testing.T) {
	h := newHarness(t, sqliteDB(t), shortLimits, func(c *Config, _ *Deps) { c.StreamMaxLife = 50 * time.Millisecond })
	id, _ := h.fileServer(1024)
	resp, err := h.stream(id, h.token)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if got := readToEnd(t, resp); !strings.Contains(got, ": the stream reached its maximum life; reconnect\n\n") {
		t.Errorf("stream = %q, want it to end at its maximum life", got)
	}
}

// TestStreamCap: servers.MaxStreams streams per server; the next one is
// 409 STREAM_LIMIT_REACHED until one ends.
func TestStreamCap(t *testing.T) {
	routes := newFinishedRequests()
	h := newHarness(t, sqliteDB(t), watchRequests(routes))
	id, _ := h.fileServer(1024)
	other, _ := h.fileServer(1024)
	var open []*http.Response
	for i := range servers.MaxStreams {
		resp, err := h.stream(id, h.token)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream #%d: %v %v", i+1, resp, err)
		}
		open = append(open, resp)
	}
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	st, _, body := h.do("GET", Prefix+"/servers/"+id+"/console/stream", h.token, nil)
	wantError(t, st, body, 409, "STREAM_LIMIT_REACHED", fmt.Sprint(servers.MaxStreams))
	// Another server has its own streams.
	resp, err := h.stream(other, h.token)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream of another server: %v %v", resp, err)
	}
	resp.Body.Close()
	// One ends: there is room for one more. Three streams have finished
	// then: the refused one, the other server's and this one.
	open[0].Body.Close()
	open = open[1:]
	waitFinished(t, routes, "GET /servers/{id}/console/stream", 3)
	resp, err = h.stream(id, h.token)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream after one ended: %v %v", resp, err)
	}
	open = append(open, resp)
}

// deadlineRecorder records the deadlines http.ResponseController sets.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	reads, writes []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.reads = append(d.reads, t)
	return nil
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.writes = append(d.writes, t)
	return nil
}

// TestDeadlineBody: a body gets a read deadline per MiB step, cleared at
// its end (so net/http's background read cannot cancel the request
// later); a read that times out is errSlowBody (408), another read failure
// the client's (400).
func TestDeadlineBody(t *testing.T) {
	lim := transferLimits{idle: time.Second, rate: 1 << 20}
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	body := &deadlineBody{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", 5<<19))), rc: http.NewResponseController(rec), lim: lim}
	before := time.Now()
	if n, err := io.Copy(io.Discard, body); err != nil || n != 5<<19 {
		t.Fatalf("read the body: %d, %v", n, err)
	}
	if len(rec.reads) != 4 || !rec.reads[3].IsZero() {
		t.Fatalf("read deadlines = %v; want one per MiB step (3) and then none", rec.reads)
	}
	for _, d := range rec.reads[:3] {
		if d.Before(before.Add(lim.timeFor(transferStep))) {
			t.Errorf("read deadline %v is less than a step's time (%v) after the start", d.Sub(before), lim.timeFor(transferStep))
		}
	}

	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{{timeout, 408, "REQUEST_TIMEOUT"}, {io.ErrUnexpectedEOF, 400, "VALIDATION_ERROR"}} {
		body := &deadlineBody{ReadCloser: io.NopCloser(iotestErrReader{tc.err}), rc: http.NewResponseController(rec), lim: lim}
		_, err := io.ReadAll(body)
		if st, eb := apiError(fmt.Errorf("write file: %w", err)); st != tc.status || eb.Code != tc.code {
			t.Errorf("body read failing with %v answers %d %s, want %d %s", tc.err, st, eb.Code, tc.status, tc.code)
		}
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestWriteDeadlines: an answer gets a write deadline at its first write,
// then one per MiB step or per write larger than a step.
func TestWriteDeadlines(t *testing.T) {
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	w := &statusWriter{ResponseWriter: rec, rc: http.NewResponseController(rec), lim: transferLimits{idle: time.Second, rate: 1 << 20}}
	w.WriteHeader(200)
	for range 3 {
		w.Write(make([]byte, 100))
	}
	if len(rec.writes) != 1 {
		t.Fatalf("after the header and 300 bytes: %d write deadlines, want 1", len(rec.writes))
	}
	w.Write(make([]byte, 3<<20)) // larger than a step: its own, for its size
	if len(rec.writes) != 2 || rec.writes[1].Sub(rec.writes[0]) < 2*time.Second {
		t.Fatalf("after a 3 MiB write: deadlines %v, want a second one ~3 s later than the first", rec.writes)
	}
	for range 40 {
		w.Write(make([]byte, 64<<10)) // 2.5 MiB in 64 KiB writes: three more steps
	}
	if len(rec.writes) != 5 {
		t.Errorf("after 2.5 MiB more in small writes: %d write deadlines, want 5", len(rec.writes))
	}
}
