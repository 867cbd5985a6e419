package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Log lines of `kiln serve` are buffered: one access-log line per request
// written with its own write(2) cost about a tenth of the CPU of a 200-server
// list answer (docs/benchmarks.md). The buffer goes out every
// logFlushEvery, whenever logFlushBytes are waiting, right after any record
// at warn or above, and when serve ends. A kill -9 loses at most the last
// logFlushEvery of info and debug lines, never a warning or an error.
const (
	logFlushEvery = 100 * time.Millisecond
	logFlushBytes = 64 << 10
)

// bufferedLog is an io.Writer that batches writes to w.
type bufferedLog struct {
	mu      sync.Mutex
	w       io.Writer
	buf     []byte
	timer   *time.Timer
	pending bool // timer armed
	closed  bool
}

func newBufferedLog(w io.Writer) *bufferedLog { return &bufferedLog{w: w} }

func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	switch {
	case len(b.buf) >= logFlushBytes:
		b.flushLocked()
	case !b.pending:
		b.pending = true
		if b.timer == nil {
			b.timer = time.AfterFunc(logFlushEvery, b.Flush)
		} else {
			b.timer.Reset(logFlushEvery)
		}
	}
	return len(p), nil
}

// Flush writes out what is waiting.
func (b *bufferedLog) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *bufferedLog) flushLocked() {
	b.pending = false
	if len(b.buf) == 0 {
		return
	}
	_, _ = b.w.Write(b.buf) // nowhere to report a failing log destination
	if cap(b.buf) > 4*logFlushBytes {
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
}

// Close flushes and makes later writes go straight through.
func (b *bufferedLog) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

// flushingHandler flushes the buffer after every record at warn or above.
type flushingHandler struct {
	slog.Handler
	buf *bufferedLog
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.buf.Flush()
	}
	return err
}

func (h flushingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return flushingHandler{h.Handler.WithAttrs(as), h.buf}
}

func (h flushingHandler) WithGroup(name string) slog.Handler {
	return flushingHandler{h.Handler.WithGroup(name), h.buf}
}
