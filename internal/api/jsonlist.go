package api

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/servers"
)

// The server list is the hottest answer of the API (bots poll it): it is
// written by hand into a pooled buffer instead of through encoding/json's
// reflection, which cost more than a third of the CPU of a 200-server list
// (docs/benchmarks.md). TestServerListEncoding keeps it byte-for-byte
// equal to what writeJSON makes of serverJSON.

// answerBuffers hold the hand-written answers (lists, contents) between
// requests: a fresh buffer of a few MiB costs more in page faults on a VM
// than writing the answer into it. A buffer is kept up to
// maxPooledAnswer bytes (a 10,000-entry file list is 2.4 MB).
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledAnswer = 4 << 20

func getAnswerBuffer(sizeHint int) *[]byte {
	bp := answerBuffers.Get().(*[]byte)
	if cap(*bp) < sizeHint {
		*bp = make([]byte, 0, sizeHint)
	}
	return bp
}

// putAnswerBuffer keeps b, the buffer bp handed out as it grew, for the
// next answer. A nil bp (a piece that carries an error, no buffer) is
// nothing to keep.
func putAnswerBuffer(bp *[]byte, b []byte) {
	if bp != nil && cap(b) <= maxPooledAnswer {
		*bp = b[:0]
		answerBuffers.Put(bp)
	}
}

// writePooled answers 200 with the JSON that fill appends, built in a
// pooled buffer (sizeHint bytes reserved) and sent with its length.
func writePooled(w http.ResponseWriter, sizeHint int, fill func(b []byte) []byte) {
	bp := getAnswerBuffer(sizeHint)
	b := fill((*bp)[:0])
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	putAnswerBuffer(bp, b)
}

// listEncoding is a team's server list with everything but the live
// resources already written: each server's text before and after its
// "resources" object. It is built once per servers.Listing (one list
// version) and shared by every request that reads that version; a request
// then only writes the resource figures, which change between samples.
type listEncoding struct {
	src  *servers.Listing
	n    int
	text []byte // server i: text[ends[2i-1]:ends[2i]] (head), text[ends[2i]:ends[2i+1]] (tail)
	ends []int
}

func encodeList(src *servers.Listing, rows []servers.Server) *listEncoding {
	e := &listEncoding{src: src, n: len(rows), ends: make([]int, 0, 2*len(rows))}
	b := make([]byte, 0, len(rows)*192)
	for _, sv := range rows {
		b = appendServerHead(b, sv)
		e.ends = append(e.ends, len(b))
		b = appendServerTail(b, sv)
		e.ends = append(e.ends, len(b))
	}
	e.text = b
	return e
}

// appendTo writes {"servers":[…],"count":n} with server i's resources
// from res(i).
func (e *listEncoding) appendTo(b []byte, res func(i int) servers.Resources) []byte {
	b = append(b, `{"servers":[`...)
	start := 0
	for i := range e.n {
		if i > 0 {
			b = append(b, ',')
		}
		head, tail := e.ends[2*i], e.ends[2*i+1]
		b = append(b, e.text[start:head]...)
		b = appendResources(b, res(i))
		b = append(b, e.text[head:tail]...)
		start = tail
	}
	b = append(b, `],"count":`...)
	b = strconv.AppendInt(b, int64(e.n), 10)
	return append(b, "}\n"...)
}

// listEncodings keeps the latest listEncoding of each team.
type listEncodings struct {
	mu     sync.Mutex
	byTeam map[string]*listEncoding
}

// maxEncodedLists bounds the teams whose encoded lists are kept.
const maxEncodedLists = 4096

func (c *listEncodings) get(teamID string, l *servers.Listing) *listEncoding {
	c.mu.Lock()
	e := c.byTeam[teamID]
	c.mu.Unlock()
	if e != nil && e.src == l {
		return e
	}
	e = encodeList(l, l.Servers)
	c.mu.Lock()
	if c.byTeam == nil || len(c.byTeam) >= maxEncodedLists {
		c.byTeam = make(map[string]*listEncoding)
	}
	c.byTeam[teamID] = e
	c.mu.Unlock()
	return e
}

// writeServerList answers a team's list.
func writeServerList(w http.ResponseWriter, e *listEncoding) {
	writePooled(w, len(e.text)+e.n*96+32, func(b []byte) []byte { return e.appendTo(b, e.src.Resources) })
}

// appendServerHead writes serverJSON's fields in its order up to the
// resources object; appendResources the object; appendServerTail the rest.
func appendServerHead(b []byte, s servers.Server) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, s.ID)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, s.Name)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, s.Status)
	b = append(b, `,"address":`...)
	b = appendJSONString(b, s.Address)
	return append(b, `,"resources":`...)
}

func appendResources(b []byte, r servers.Resources) []byte {
	b = append(b, `{"cpu":`...)
	b = appendJSONFloat(b, r.CPU)
	b = append(b, `,"memory_bytes":`...)
	b = strconv.AppendInt(b, r.MemoryBytes, 10)
	b = append(b, `,"disk_bytes":`...)
	b = strconv.AppendInt(b, r.DiskBytes, 10)
	b = append(b, `,"uptime_ms":`...)
	b = strconv.AppendInt(b, r.UptimeMS, 10)
	return append(b, '}')
}

func appendServerTail(b []byte, s servers.Server) []byte {
	b = append(b, `,"software":`...)
	b = appendJSONString(b, s.Software)
	b = append(b, `,"node":`...)
	b = appendJSONString(b, s.Node)
	b = append(b, `,"node_status":`...)
	if s.NodeStatus == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, s.NodeStatus)
	}
	b = append(b, `,"configuration_id":`...)
	if s.ConfigurationID == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *s.ConfigurationID)
	}
	return append(b, '}')
}

// appendJSONFloat formats f as encoding/json does; the rare values it
// writes in exponent form are left to encoding/json itself.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, '0') // never produced; encoding/json would fail
	}
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		out, _ := json.Marshal(f)
		return append(b, out...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// specialMask flags, in bit 7 of each byte, the bytes of the 8 in x
// (little endian: x's low byte is the first) that need escaping or UTF-8
// decoding — below 0x20, '"', '\\' or 0x80 and above (bit tricks on one
// 64-bit word, see "Bit Twiddling Hacks", hasless and haszero). A borrow
// between bytes can only flag bytes above the first special one, never
// below it, so the lowest flag is exact; 0 means none needs care.
func specialMask(x uint64) uint64 {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	q := x ^ ('"' * lsb)
	bs := x ^ ('\\' * lsb)
	return (x | (x - 0x20*lsb) | (q - lsb) | (bs - lsb)) & msb
}

// special8 is the index of the first byte specialMask flags in x, 8 when
// none.
func special8(x uint64) int { return bits.TrailingZeros64(specialMask(x)) >> 3 }

// appendJSONString quotes s as writeJSON's encoder does (HTML escaping
// off): control characters, U+2028 and U+2029 escaped; invalid UTF-8
// replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	return append(appendJSONText(append(b, '"'), s), '"')
}

// appendJSONText is appendJSONString without the quotes around.
func appendJSONText(b []byte, s string) []byte {
	p := unsafe.Slice(unsafe.StringData(s), len(s))
	start := 0
	for i := 0; i < len(s); {
		// Up to the first byte that needs care (file contents are mostly
		// plain ASCII): 32 bytes per step while none does — four
		// independent word checks, no compare per byte — then the exact
		// position from the first flagged word.
		if i+32 <= len(s) {
			m0 := specialMask(binary.LittleEndian.Uint64(p[i:]))
			m1 := specialMask(binary.LittleEndian.Uint64(p[i+8:]))
			m2 := specialMask(binary.LittleEndian.Uint64(p[i+16:]))
			m3 := specialMask(binary.LittleEndian.Uint64(p[i+24:]))
			switch {
			case m0|m1|m2|m3 == 0:
				i += 32
				continue
			case m0 != 0:
				i += bits.TrailingZeros64(m0) >> 3
			case m1 != 0:
				i += 8 + bits.TrailingZeros64(m1)>>3
			case m2 != 0:
				i += 16 + bits.TrailingZeros64(m2)>>3
			default:
				i += 24 + bits.TrailingZeros64(m3)>>3
			}
		} else if i+8 <= len(s) {
			k := special8(binary.LittleEndian.Uint64(p[i:]))
			i += k
			if k == 8 {
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return b
}

// appendFileEntry writes toFileEntry(e) as fileEntryJSON's fields, in
// its order, without building the intermediate strings.
func appendFileEntry(b []byte, e files.Entry) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, e.Name)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, `,"is_file":`...)
	b = strconv.AppendBool(b, e.IsFile())
	b = append(b, `,"is_directory":`...)
	b = strconv.AppendBool(b, e.IsDir())
	b = append(b, `,"is_symlink":`...)
	b = strconv.AppendBool(b, e.IsSymlink())
	b = append(b, `,"mime":`...)
	b = appendJSONString(b, e.MIME)
	b = append(b, `,"mode":"`...)
	b = e.AppendModeString(b)
	b = append(b, `","mode_bits":"`...)
	b = strconv.AppendUint(b, uint64(e.Mode.Perm()), 8)
	b = append(b, `","modified_at":"`...)
	b = e.ModTime.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `","created_at":"`...)
	b = e.CreatedAt.UTC().AppendFormat(b, time.RFC3339)
	return append(b, `"}`...)
}

// writeFileList answers {"files":[…],"count":n,"next_cursor":next}; a
// large directory is the second-hottest answer (a file manager opening
// world/region).
func writeFileList(w http.ResponseWriter, list []files.Entry, next string) {
	writePooled(w, len(list)*256+32, func(b []byte) []byte {
		b = append(b, `{"files":[`...)
		for i, e := range list {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFileEntry(b, e)
		}
		b = append(b, `],"count":`...)
		b = strconv.AppendInt(b, int64(len(list)), 10)
		b = append(b, `,"next_cursor":`...)
		b = appendJSONString(b, next)
		return append(b, "}\n"...)
	})
}

// Sizes of writeQuotedFile's buffers: what it reads at once, and how much
// quoted text it gathers before writing to the connection.
const (
	quoteChunk = 128 << 10
	quoteFlush = 256 << 10
)

var quoteChunks = sync.Pool{New: func() any { b := make([]byte, quoteChunk); return &b }}

// writeQuotedFile answers 200 with the first size bytes of f as one JSON
// string, as writeJSON would write it, streamed: read in chunks, quoted
// into pooled buffers, written out every quoteFlush bytes. No buffer the
// size of the file is ever made — a fresh one of a few MiB costs more in
// page faults than the read and the quoting together on a VM, and ten
// concurrent 10 MiB answers would hold 200 MiB (docs/benchmarks.md). The
// reading and quoting run in a goroutine one piece ahead of the writing,
// so the quoting (~0.3 ms per MiB) overlaps the sending instead of adding
// to it. An answer that fits in one piece goes out with its
// Content-Length; a larger one is chunked. A read error before the first
// byte is answered as an error; after it, the connection is aborted (the
// client sees a truncated answer, never a wrong one). A panic in the
// reading goroutine ends the answer as a read error does (panics.Catch).
// f is not used after writeQuotedFile returns.
func writeQuotedFile(w http.ResponseWriter, f io.Reader, size int64) error {
	pieces := make(chan quotedPiece, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pieces)
		err := panics.Catch(func() error { quoteInto(pieces, stop, f, size); return nil })
		if err != nil { // ends the answer as a read error does
			select {
			case pieces <- quotedPiece{err: err}:
			case <-stop:
			}
		}
	}()
	defer func() {
		close(stop)
		for p := range pieces { // unblock and drain the producer
			putAnswerBuffer(p.buf, p.b)
		}
		wg.Wait()
	}()
	started := false
	for p := range pieces {
		if p.err != nil {
			if !started {
				return fmt.Errorf("read for contents: %w", p.err)
			}
			panic(http.ErrAbortHandler)
		}
		if !started {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			if p.last {
				h.Set("Content-Length", strconv.Itoa(len(p.b)))
			}
			w.WriteHeader(http.StatusOK)
			started = true
		}
		_, err := w.Write(p.b)
		putAnswerBuffer(p.buf, p.b)
		if err != nil {
			return nil // the client went away
		}
	}
	return nil
}

// quotedPiece is a part of writeQuotedFile's answer, in a pooled buffer,
// or the read error that ends it.
type quotedPiece struct {
	buf  *[]byte
	b    []byte
	last bool
	err  error
}

// quoteInto reads size bytes of f in quoteChunk chunks, quotes them and
// sends the text in pieces of at least quoteFlush bytes (the last one
// ends the string), until stop is closed.
func quoteInto(pieces chan<- quotedPiece, stop <-chan struct{}, f io.Reader, size int64) {
	inp := quoteChunks.Get().(*[]byte)
	defer quoteChunks.Put(inp)
	in := *inp
	send := func(p quotedPiece) bool {
		select {
		case pieces <- p:
			return true
		case <-stop:
			putAnswerBuffer(p.buf, p.b)
			return false
		}
	}
	bp := getAnswerBuffer(quoteFlush + quoteChunk*6/5)
	b := append((*bp)[:0], '"')
	carry := 0 // bytes of an incomplete UTF-8 sequence kept for the next chunk
	for remaining := size; remaining > 0 || carry > 0; {
		n := 0
		if remaining > 0 {
			var err error
			n, err = io.ReadFull(f, in[carry:carry+int(min(int64(len(in)-carry), remaining))])
			remaining -= int64(n)
			if err != nil {
				remaining = 0 // the file shrank: answer what was there
				if err != io.ErrUnexpectedEOF && err != io.EOF {
					putAnswerBuffer(bp, b)
					send(quotedPiece{err: err})
					return
				}
			}
		}
		text := in[:carry+n]
		carry = 0
		if remaining > 0 {
			// Never split a UTF-8 sequence between two chunks: it would be
			// quoted as two invalid ones.
			carry = incompleteTail(text)
			text = text[:len(text)-carry]
		}
		b = appendJSONText(b, unsafe.String(unsafe.SliceData(text), len(text)))
		copy(in, in[len(text):len(text)+carry])
		if len(b) >= quoteFlush && remaining > 0 {
			if !send(quotedPiece{buf: bp, b: b}) {
				return
			}
			bp = getAnswerBuffer(quoteFlush + quoteChunk*6/5)
			b = (*bp)[:0]
		}
	}
	send(quotedPiece{buf: bp, b: append(b, "\"\n"...), last: true})
}

// incompleteTail is how many bytes at the end of p begin a UTF-8 sequence
// that p does not finish (0 to 3).
func incompleteTail(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if c >= 0xC0 { // a leading byte
			if utf8.FullRune(p[len(p)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}
