package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
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

func TestStreamsEndCancelsLiveStream(t *testing.T) {
	s := newStreams()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		s.end() // shutdown begins while the stream is open
		<-r.Context().Done()
	})
	s.wrap(h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}
