package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/validate"
)

// TestClientMistakesAreNotErrors: a command sent to a stopped server (502
// SERVER_OFFLINE) and the usual 4xx mistakes are logged at info — the
// access log line with the answer's code — never at ERROR.
func TestClientMistakesAreNotErrors(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, _ := h.fileServer(1024)
	st, body := h.postJSON("/servers/"+id+"/command", map[string]string{"command": "say hi"})
	wantError(t, st, body, 502, "SERVER_OFFLINE", "not running")

	h.postJSON("/servers/"+id+"/command", map[string]string{"command": ""})               // 400
	h.postJSON("/servers/"+id+"/power", map[string]string{"action": "explode"})           // 400
	h.postJSON("/servers/00000000-0000-4000-8000-000000000000/command", map[string]any{}) // 404
	h.do("GET", Prefix+"/servers/not-a-uuid", h.token, nil)                               // 400
	h.do("GET", Prefix+"/servers", "kiln_pat_wrong", nil)                                 // 401
	h.do("GET", Prefix+"/nowhere", h.token, nil)                                          // 404
	h.do("PUT", Prefix+"/servers", h.token, nil)                                          // 405
	h.files("GET", id, "contents?file=/nope", nil)                                        // 404

	logs := h.logs.String()
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("a client's mistake was logged at ERROR: %s", line)
		}
	}
	var refused, access bool
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, "level=INFO") || !strings.Contains(line, "code=SERVER_OFFLINE") {
			continue
		}
		refused = refused || strings.Contains(line, `msg="request refused"`)
		access = access || strings.Contains(line, "msg=request ") && strings.Contains(line, "status=502")
	}
	if !refused || !access {
		t.Errorf("the command to a stopped server: refused line %v, access line with its code %v; want both at INFO\n%s", refused, access, logs)
	}
}

// TestWriteErrorLevels: which answers writeError logs, and at what level.
func TestWriteErrorLevels(t *testing.T) {
	diskFull := &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name  string
		err   error
		level string // "" = no line of writeError's own
	}{
		{"validation", validate.Errorf("name", "is required"), ""},
		{"not found", servers.ErrNotFound, ""},
		{"command to a stopped server", fmt.Errorf("send: %w", servers.ErrOffline), "INFO"},
		{"over the server's disk limit", files.ErrQuota, "INFO"},
		{"pull while stopping", pull.ErrClosed, "INFO"},
		{"host disk full", diskFull, "ERROR"},
		{"unknown", errors.New("database on fire"), "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			s := &Server{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			s.writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil), tc.err)
			got := ""
			if line := buf.String(); line != "" {
				got = line[strings.Index(line, "level=")+len("level=") : strings.Index(line, " msg=")]
			}
			if got != tc.level {
				t.Errorf("writeError(%v) logged at %q, want %q: %s", tc.err, got, tc.level, buf.String())
			}
		})
	}
}
