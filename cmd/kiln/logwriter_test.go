package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int // writes
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBufferedLog: info lines are batched into one write that comes out by
// itself shortly after; a warning goes out at once with what preceded it;
// Close flushes the rest.
func TestBufferedLog(t *testing.T) {
	var out *lockedBuffer
	var log *slog.Logger
	var buf *bufferedLog
	// The flush timer starts at the first line: a round in which this
	// goroutine was held up for logFlushEvery before it looked (a loaded
	// machine) may rightly see the lines out already, or in two writes;
	// it proves nothing and is taken again.
	for round := 1; ; round++ {
		out = &lockedBuffer{}
		var err error
		if log, buf, err = newLogger("info", "text", out); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		log.Info("one")
		log.Info("two")
		log.Debug("hidden")
		s := out.String()
		if time.Since(start) >= logFlushEvery && round < 5 {
			buf.Close()
			continue
		}
		if s != "" {
			t.Fatalf("info lines written at once: %q", s)
		}
		break
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "msg=two") {
		if time.Now().After(deadline) {
			t.Fatal("buffered info lines never flushed by the timer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	out.mu.Lock()
	writes := out.n
	out.mu.Unlock()
	if writes != 1 {
		t.Fatalf("two info lines took %d writes, want 1", writes)
	}

	log.Info("three")
	log.Warn("careful")
	if s := out.String(); !strings.Contains(s, "msg=three") || !strings.Contains(s, "msg=careful") {
		t.Fatalf("a warning did not flush the buffer: %q", s)
	}
	log.Info("last")
	buf.Close()
	if s := out.String(); !strings.Contains(s, "msg=last") || strings.Contains(s, "hidden") {
		t.Fatalf("after Close: %q", s)
	}
	log.Info("after close")
	if s := out.String(); !strings.Contains(s, "after close") {
		t.Fatalf("a line after Close was not written through: %q", s)
	}
}
