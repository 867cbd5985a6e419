package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
)

// handler answers with the given Content-Type and reports whether its
// request context had ended once the header was written.
func streamHandler(contentType string, ended *bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(http.StatusOK)
		*ended = r.Context().Err() != nil
	})
}

func TestStreamsEndOnlyEventStreams(t *testing.T) {
	for _, c := range []struct {
		name        string
		contentType string
		afterEnd    bool
		wantEnded   bool
	}{
		{"event stream before shutdown", "text/event-stream", false, false},
		{"event stream begun during shutdown", "text/event-stream", true, true},
		{"ordinary answer during shutdown", "application/json", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStreams()
			if c.afterEnd {
				s.end()
			}
			var ended bool
			s.wrap(streamHandler(c.contentType, &ended)).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			if ended != c.wantEnded {
				t.Errorf("request context ended = %v, want %v", ended, c.wantEnded)
			}
			if len(s.live) != 0 {
				t.Errorf("%d streams still tracked after the answer ended", len(s.live))
			}
		})
	}
}

// TestStreamsEndCancelsLiveStream: an event stream open when shutdown
// begins has its request context cancelled, so its handler returns. In a
// synctest bubble the handler, were its context never cancelled, would be
// durably blocked once every goroutine is idle: the test fails then,
// instead of hanging.
func TestStreamsEndCancelsLiveStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStreams()
		var cause error
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			s.end() // shutdown begins while the stream is open
			<-r.Context().Done()
			cause = r.Context().Err()
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.wrap(h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("the open event stream still runs after end: its request context was not cancelled")
		}
		if !errors.Is(cause, context.Canceled) {
			t.Errorf("the stream's context ended with %v, want context.Canceled", cause)
		}
	})
}

// countingWriter counts the bytes that reach net/http's writer through
// ReadFrom, the path on which it sends a file with sendfile(2).
type countingWriter struct {
	http.ResponseWriter
	viaReadFrom int64
}

func (w *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	n, err := w.ResponseWriter.(io.ReaderFrom).ReadFrom(src)
	w.viaReadFrom += n
	return n, err
}

// TestStreamsKeepSendfile: the streams wrapper of kiln serve passes a
// file's body on through ReadFrom, so a download under it still reaches
// net/http's sendfile path (issue 33).
func TestStreamsKeepSendfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "world.bin")
	want := bytes.Repeat([]byte("kiln"), 1<<20)
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	inner := newStreams().wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(w, f)
	}))
	var seen int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		inner.ServeHTTP(cw, r)
		seen = cw.viaReadFrom
	}))
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want the file's %d", len(got), len(want))
	}
	if seen != int64(len(want)) {
		t.Errorf("%d bytes reached net/http through ReadFrom, want %d", seen, len(want))
	}
}
