package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// Transfer deadlines (doc.go). Every request body is read, and every answer
// written, in steps of transferStep bytes; each step must be done within
// the idle time plus the time it takes at the minimum rate, counted from
// its first byte. A client that stops reading or sending is cut off
// within one step's time, one that trickles below the rate within a few,
// whatever the size of the transfer; a fast one never meets a deadline.
const (
	defaultTransferIdle    = 30 * time.Second
	defaultMinTransferRate = 64 << 10 // bytes per second
	transferStep           = 1 << 20
)

// transferLimits are the idle time and minimum rate of Config.
type transferLimits struct {
	idle time.Duration
	rate int64 // bytes per second
}

// timeFor is how long a step of n bytes may take.
func (l transferLimits) timeFor(n int64) time.Duration {
	return l.idle + time.Duration(float64(n)/float64(l.rate)*float64(time.Second))
}

// errSlowBody marks a request body that did not arrive in time: 408
// REQUEST_TIMEOUT.
var errSlowBody = errors.New("the request body arrived too slowly")

// bodyError is a failure to read the request body: the client's (it sent
// too slowly, went away or sent a malformed body), never Kiln's.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read request body: " + e.err.Error() }

func (e *bodyError) Unwrap() []error {
	if errors.Is(e.err, os.ErrDeadlineExceeded) {
		return []error{errSlowBody, e.err}
	}
	return []error{e.err}
}

// deadlineBody reads a request body under step deadlines. At the end of
// the body it clears the read deadline: net/http then reads the
// connection in the background to notice a client going away, and a
// deadline passing there would cancel the request's context while the
// handler works on.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	lim     transferLimits
	read    int64
	stepEnd int64
	armed   bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if !b.armed || b.read >= b.stepEnd {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.lim.timeFor(transferStep)))
		b.stepEnd = b.read + transferStep
		b.armed = true
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	switch {
	case err == io.EOF:
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	case err != nil:
		return n, &bodyError{err}
	}
	return n, nil
}

// armWrite gives the connection a write deadline for a write of n more
// bytes when they pass the step the current deadline covers (or none was
// set for this answer yet): the time for max(n, transferStep) bytes from
// now.
func (w *statusWriter) armWrite(n int64) {
	if w.armed && w.bytes+n <= w.stepEnd {
		return
	}
	step := max(n, transferStep)
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.lim.timeFor(step)))
	w.stepEnd = w.bytes + step
	w.armed = true
}
