package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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
