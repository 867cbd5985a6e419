package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/servers"
)

// TestServerListEncoding: the hand-written list answer is byte-for-byte
// what encoding/json makes of the same list, for hostile strings and odd
// numbers too.
func TestServerListEncoding(t *testing.T) {
	strs := []string{"", "lobby", `quo"te`, `back\slash`, "tab\tnew\nline\r", "\x00\x01\x1f\x7f", "<script>&</script>",
		"é漢字🎮", "\u2028\u2029", "bad\xffutf8\xc3", "ends with \\", "Ω"}
	floats := []float64{0, 1, 12.5, 99.99999, 1e-7, 3.3e-5, 1e21, 123456789.125, 0.1 + 0.2}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	var list []servers.Server
	for i := range 300 {
		cfg := pick()
		sv := servers.Server{
			ID: pick(), Name: pick(), Status: pick(), Address: pick(), Software: pick(), Node: pick(),
			Resources: servers.Resources{CPU: floats[i%len(floats)], MemoryBytes: rng.Int64N(1 << 40), DiskBytes: rng.Int64N(1 << 40), UptimeMS: rng.Int64N(1 << 40)},
		}
		if i%3 == 0 {
			sv.ConfigurationID = &cfg
		}
		if i%2 == 0 {
			sv.NodeStatus = pick()
		}
		list = append(list, sv)
	}
	for _, n := range []int{0, 1, len(list)} {
		want := struct {
			Servers []serverJSON `json:"servers"`
			Count   int          `json:"count"`
		}{Servers: make([]serverJSON, n), Count: n}
		for i, sv := range list[:n] {
			want.Servers[i] = toServerJSON(sv)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf) // as writeJSON
		enc.SetEscapeHTML(false)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		wb := buf.Bytes()
		got := encodeList(nil, list[:n]).appendTo(nil, func(i int) servers.Resources { return list[i].Resources })
		if string(got) != string(wb) {
			t.Fatalf("list of %d: hand-written JSON differs from encoding/json\ngot  %s\nwant %s", n, got, wb)
		}
	}
}

// TestContentsEncoding: the hand-quoted contents answer is what writeJSON
// makes of the same string, for text with every kind of character.
func TestContentsEncoding(t *testing.T) {
	var b strings.Builder
	for r := rune(0); r < 0x3000; r += 7 {
		b.WriteRune(r)
	}
	b.WriteString("\xff\xfe bad utf8 \u2028\u2029 <tag>&amp; \"q\" \\ end")
	s := b.String()
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	got := append(appendJSONString(nil, s), '\n')
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("hand-quoted string differs from encoding/json:\ngot  %q\nwant %q", got, want.Bytes())
	}
}

// TestContentsEncodingPositions: mostly-plain text with a special byte or
// rune at every offset of a 32-byte step and its tail (what the word-wise
// fast path skips over) is quoted as encoding/json quotes it.
func TestContentsEncodingPositions(t *testing.T) {
	specials := []string{"\n", "\"", "\\", "\x00", "\x1f", "\x7f", "é", "\u2028", "\xff", "\xe2\x82", "𝄞"}
	for n := 0; n < 80; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				s := strings.Repeat("a", pos) + sp + strings.Repeat("z", n-pos)
				var want bytes.Buffer
				enc := json.NewEncoder(&want)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(s); err != nil {
					t.Fatal(err)
				}
				if got := append(appendJSONString(nil, s), '\n'); !bytes.Equal(got, want.Bytes()) {
					t.Fatalf("quoting %q:\ngot  %q\nwant %q", s, got, want.Bytes())
				}
			}
		}
	}
}

// TestFileListEncoding: the hand-written file list is what writeJSON makes
// of the same entries.
func TestFileListEncoding(t *testing.T) {
	names := []string{"server.properties", "we\"ird\\name\n", "world", "\x01ctl", "漢字.yml", "bad\xfe", "<a>&b"}
	var list []files.Entry
	modes := []fs.FileMode{0o644, 0o755 | fs.ModeDir, 0o777 | fs.ModeSymlink, 0o600 | fs.ModeNamedPipe, 0o4755, 0}
	for i := range 50 {
		list = append(list, files.Entry{
			Name: names[i%len(names)], Size: int64(i * 12345), Mode: modes[i%len(modes)],
			MIME:    "text/plain; charset=utf-8",
			ModTime: time.Date(2026, 11, 22, 10, 15, i, i*1000, time.FixedZone("x", 3600*(i%3))), CreatedAt: time.Unix(int64(i)*1e8, 0),
		})
	}
	for i, n := range []int{0, 1, len(list)} {
		next := []string{"", "AWZ3b3JsZA", names[i]}[i] // the last: any string is quoted right
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Files      []fileEntryJSON `json:"files"`
			Count      int             `json:"count"`
			NextCursor string          `json:"next_cursor"`
		}{Files: toFileEntries(list[:n]), Count: n, NextCursor: next}); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		writeFileList(rec, list[:n], next)
		if got := rec.Body.String(); got != want.String() {
			t.Fatalf("list of %d differs:\ngot  %s\nwant %s", n, got, want.String())
		}
	}
}

func toFileEntries(list []files.Entry) []fileEntryJSON {
	out := make([]fileEntryJSON, len(list))
	for i, e := range list {
		out[i] = toFileEntry(e)
	}
	return out
}

// TestSpecial8: the first byte needing care is found exactly, whatever
// its value and position and whatever plain bytes surround it; a word of
// plain bytes says 8.
func TestSpecial8(t *testing.T) {
	for _, fill := range []byte{'a', ' ', '~', '!', '#', '[', ']'} {
		for pos := range 8 {
			for v := range 256 {
				w := []byte(strings.Repeat(string(fill), 8))
				w[pos] = byte(v)
				want := 8
				if v < 0x20 || v == '"' || v == '\\' || v >= 0x80 {
					want = pos
				}
				if got := special8(binary.LittleEndian.Uint64(w)); got != want {
					t.Fatalf("special8(%q) = %d, want %d", w, got, want)
				}
			}
		}
	}
	// Two specials: the first one counts, borrows above it do not matter.
	for a := range 8 {
		for b := a + 1; b < 8; b++ {
			for _, v := range []byte{0, 0x1f, '"', '\\', 0x80, 0xff} {
				w := []byte("abcdefgh")
				w[a], w[b] = v, 0
				if got := special8(binary.LittleEndian.Uint64(w)); got != a {
					t.Fatalf("special8(%q) = %d, want %d", w, got, a)
				}
			}
		}
	}
}

// TestQuotedFile: the streamed contents answer is byte-for-byte what
// writeJSON makes of the whole file as one string, whatever falls on the
// chunk boundaries (runes of 2, 3 and 4 bytes, invalid sequences, escapes),
// whether it fits in one write (Content-Length) or is chunked; a file that
// shrank is answered as far as it goes.
func TestQuotedFile(t *testing.T) {
	pieces := []string{"a", "é", "漢", "🎮", "\n", "\"", "\\", "\xff", "\xe6\xbc", "\u2028", "\x01", "plain text "}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, 7, quoteChunk - 1, quoteChunk, quoteChunk + 1, quoteChunk + 3, 3*quoteChunk + 2, quoteFlush + 5, 1 << 20} {
		for _, shift := range []int{0, 1, 2, 3} {
			var sb strings.Builder
			sb.WriteString(strings.Repeat("x", shift))
			for sb.Len() < size {
				sb.WriteString(pieces[rng.IntN(len(pieces))])
			}
			data := sb.String()[:size]
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(data); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			if err := writeQuotedFile(rec, strings.NewReader(data), int64(size)); err != nil {
				t.Fatal(err)
			}
			if got, ws := rec.Body.String(), want.String(); got != ws {
				i := 0
				for i < len(got) && i < len(ws) && got[i] == ws[i] {
					i++
				}
				t.Fatalf("size %d shift %d: answer differs from encoding/json at byte %d of %d/%d", size, shift, i, len(got), want.Len())
			}
			if cl := rec.Header().Get("Content-Length"); len(want.String()) <= quoteFlush && cl != strconv.Itoa(want.Len()) {
				t.Errorf("size %d: Content-Length %q for a one-write answer of %d bytes", size, cl, want.Len())
			}
			if rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("size %d: Content-Type %q", size, rec.Header().Get("Content-Type"))
			}
		}
	}
	// The inode said 100 bytes, the file holds 10 now.
	rec := httptest.NewRecorder()
	if err := writeQuotedFile(rec, strings.NewReader("0123456789"), 100); err != nil || rec.Body.String() != "\"0123456789\"\n" {
		t.Fatalf("shrunk file: %q, %v", rec.Body.String(), err)
	}
}

// BenchmarkQuoteText measures the contents quoter on the text bench/
// files-ops.sh round-trips (lines of printable ASCII).
func BenchmarkQuoteText(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		fmt.Fprintf(&sb, "line %07d the quick brown fox jumps over the lazy dog %x\n", i, i*2654435761)
	}
	s := sb.String()[:1<<20]
	buf := make([]byte, 0, 2<<20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = appendJSONText(buf[:0], s)
	}
}

// BenchmarkFileList10k: writing the answer of a 10,000-entry list.
func BenchmarkFileList10k(b *testing.B) {
	list := make([]files.Entry, 10000)
	now := time.Now().UTC()
	for i := range list {
		list[i] = files.Entry{Name: fmt.Sprintf("file-%05d.txt", i), Size: 11, Mode: 0o644,
			ModTime: now, CreatedAt: now, MIME: "text/plain; charset=utf-8"}
	}
	w := httptest.NewRecorder()
	for b.Loop() {
		w.Body.Reset()
		writeFileList(w, list, "")
	}
}

// failingReader yields n bytes of 'a', then fails.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("input/output error")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'a'
	}
	r.n -= k
	return k, nil
}

// TestQuotedFileReadError: a read error before anything was sent is the
// handler's error (an error answer follows); after the first piece went
// out, the connection is aborted, so the client never takes a truncated
// string for the file.
func TestQuotedFileReadError(t *testing.T) {
	rec := httptest.NewRecorder()
	err := writeQuotedFile(rec, &failingReader{n: 1000}, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "input/output error") || rec.Body.Len() != 0 {
		t.Fatalf("error before the first byte: %v, body %d bytes; want the error and nothing written", err, rec.Body.Len())
	}
	rec = httptest.NewRecorder()
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Fatalf("error after the first piece: recovered %v, want http.ErrAbortHandler", r)
		}
		if rec.Code != http.StatusOK || rec.Body.Len() < quoteFlush {
			t.Fatalf("before the abort: status %d, %d bytes sent", rec.Code, rec.Body.Len())
		}
	}()
	_ = writeQuotedFile(rec, &failingReader{n: 3 * quoteFlush}, 1<<22)
	t.Fatal("writeQuotedFile returned after a read error mid-answer")
}

// FuzzQuote: the hand-written quoter (word-wise fast path included) writes
// exactly what encoding/json writes for any string, valid UTF-8 or not.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\n", strings.Repeat("x", 31) + "\x00" + strings.Repeat("y", 40), "\xff\xfe\u2028é𝄞"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := append(appendJSONString(nil, s), '\n'); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("quote(%q):\ngot  %q\nwant %q", s, got, want.Bytes())
		}
	})
}

// stallingReader yields n bytes of 'a', then waits for release and fails,
// as a read of a file on a failing disk does.
type stallingReader struct {
	n       int
	release <-chan struct{}
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		<-r.release
		return 0, errors.New("input/output error")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'a'
	}
	r.n -= k
	return k, nil
}

// goneWriter is a client that went away: every Write fails, and the
// first one closes gone.
type goneWriter struct {
	h    http.Header
	gone chan struct{}
	once sync.Once
}

func (w *goneWriter) Header() http.Header { return w.h }
func (w *goneWriter) WriteHeader(int)     {}
func (w *goneWriter) Write([]byte) (int, error) {
	w.once.Do(func() { close(w.gone) })
	return 0, errors.New("write: broken pipe")
}

// TestQuotedFileClientGoneThenReadError: the client disconnects after the
// first piece, then the read of the rest fails. The reader's error piece
// (no buffer) must not be returned to the pool — that was a nil
// dereference in the reading goroutine, which took the process down.
func TestQuotedFileClientGoneThenReadError(t *testing.T) {
	for i := range 20 { // the reader's send races the writer's stop: try both orders
		w := &goneWriter{h: http.Header{}, gone: make(chan struct{})}
		r := &stallingReader{n: 2 * quoteChunk, release: w.gone}
		if err := writeQuotedFile(w, r, 1<<22); err != nil {
			t.Fatalf("run %d: writeQuotedFile = %v, want nil (the client went away first)", i, err)
		}
	}
}

// panickingReader panics on its first read.
type panickingReader struct{}

func (panickingReader) Read([]byte) (int, error) { panic("reader exploded") }

// TestQuotedFileReaderPanics: a panic in the reading goroutine is the
// handler's error, not the end of the process.
func TestQuotedFileReaderPanics(t *testing.T) {
	rec := httptest.NewRecorder()
	err := writeQuotedFile(rec, panickingReader{}, 100)
	if _, ok := errors.AsType[*panics.Error](err); !ok || rec.Body.Len() != 0 {
		t.Fatalf("writeQuotedFile(panicking reader) = %v, body %d bytes; want a *panics.Error and nothing written", err, rec.Body.Len())
	}
}
