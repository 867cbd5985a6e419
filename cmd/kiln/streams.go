package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
)

// streams ends long-lived answers when kiln serve shuts down.
// http.Server.Shutdown waits for every answer in progress to finish, and
// an event stream (the console's Server-Sent Events) never finishes by
// itself. The rule is kept here, for every route, rather than in each
// streaming handler: an answer whose Content-Type is text/event-stream
// gets its request context cancelled when shutdown begins (or at once
// when it begins afterwards), and the handler, which watches that context
// like any other, ends the stream cleanly. Ordinary answers are left to
// finish within Shutdown's deadline.
type streams struct {
	mu       sync.Mutex
	stopping bool
	live     map[*streamWriter]struct{}
}

func newStreams() *streams { return &streams{live: map[*streamWriter]struct{}{}} }

// wrap gives every request a context that end can cancel.
func (s *streams) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		sw := &streamWriter{ResponseWriter: w, s: s, cancel: cancel}
		defer s.forget(sw)
		h.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// end cancels every stream, and those that start later. It is called when
// shutdown begins.
func (s *streams) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for sw := range s.live {
		sw.cancel()
	}
	clear(s.live)
}

func (s *streams) track(sw *streamWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		sw.cancel()
		return
	}
	s.live[sw] = struct{}{}
}

func (s *streams) forget(sw *streamWriter) {
	if !sw.tracked {
		return
	}
	s.mu.Lock()
	delete(s.live, sw)
	s.mu.Unlock()
}

// streamWriter notices when its answer turns out to be an event stream.
type streamWriter struct {
	http.ResponseWriter
	s       *streams
	cancel  context.CancelFunc
	wrote   bool
	tracked bool
}

func (w *streamWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 { // 1xx answers come before the real one
		w.wrote = true
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			w.tracked = true
			w.s.track(w)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom passes a body copied from a file to the writer below, so that
// net/http's sendfile path stays open under this wrapper (a file's
// download).
func (w *streamWriter) ReadFrom(src io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{w.ResponseWriter}, src)
}
