package api

import (
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSFTPCredentialsAPI, on both stores: GET and POST are get-or-create
// (the same credentials twice, the seed's six fields), POST
// {"rotate": true} issues a new password, and another team's token, a
// bad id and a bad body are refused with their codes.
func TestSFTPCredentialsAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		id, _ := h.fileServer(1024)
		st, first := h.sendJSON("GET", "/servers/"+id+"/sftp", nil)
		if st != 200 {
			t.Fatalf("GET sftp = %d %v", st, first)
		}
		want := "admin." + id[:8]
		if first["username"] != "admin" || first["computedUsername"] != want || first["host"] != "127.0.0.1" ||
			first["port"].(float64) != 2022 || first["uri"] != "sftp://"+want+"@127.0.0.1:2022" || len(first["password"].(string)) != 32 {
			t.Errorf("credentials = %v", first)
		}
		st, again := h.sendJSON("POST", "/servers/"+id+"/sftp", nil)
		if st != 200 || again["password"] != first["password"] {
			t.Errorf("POST without rotate = %d %v; want the same credentials", st, again)
		}
		st, rotated := h.sendJSON("POST", "/servers/"+id+"/sftp", map[string]any{"rotate": true})
		if st != 200 || rotated["password"] == first["password"] || rotated["computedUsername"] != want {
			t.Errorf("rotate = %d %v; want a new password for the same user", st, rotated)
		}
		if st, now := h.sendJSON("GET", "/servers/"+id+"/sftp", nil); st != 200 || now["password"] != rotated["password"] {
			t.Errorf("GET after the rotation = %d %v", st, now)
		}
		st, body := h.postJSON("/servers/"+id+"/sftp", map[string]any{"rotate": "yes"})
		wantError(t, st, body, 400, "VALIDATION_ERROR", "rotate")
		st, _, body = h.do("GET", Prefix+"/servers/"+id+"/sftp", h.otherTeamToken(), nil)
		wantError(t, st, body, 404, "SERVER_NOT_FOUND", "server")
		st, _, body = h.do("GET", Prefix+"/servers/nope/sftp", h.token, nil)
		wantError(t, st, body, 400, "INVALID_SERVER_ID", "UUID")
		if strings.Contains(h.logs.String(), rotated["password"].(string)) {
			t.Error("a password reached the log")
		}
	})
}
