package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSecretsAPI: a team's secrets through the API, whole answers: set,
// replaced (its created time kept), listed by name without a value,
// deleted; bad names and values refused at their field; another team
// neither sees nor deletes them; and the value is in no answer, no log
// line and no table but sealed.
func TestSecretsAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		const value = "correct-horse-battery-staple"
		put := func(name, body string, token ...string) (int, []byte) {
			t.Helper()
			tok := h.token
			if len(token) > 0 {
				tok = token[0]
			}
			st, _, data := h.do("PUT", Prefix+"/secrets/"+name, tok, strings.NewReader(body), "Content-Type", "application/json")
			return st, data
		}
		st, _, body := h.do("GET", Prefix+"/secrets", h.token, nil)
		wantBody(t, "the list before any", st, body, 200, `{"secrets":[],"count":0}`)

		st, body = put("RCON", `{"value":"`+value+`"}`)
		sec := mustJSON(body)["secret"].(map[string]any)
		created := fmt.Sprint(int64(sec["created_at"].(float64)))
		wantBody(t, "PUT of a new secret", st, body, 200, `{"ok":true,"created":true,"secret":{"name":"RCON","created_at":`+created+`,"updated_at":`+created+`}}`)
		st, body = put("RCON", `{"value":"`+value+`-2"}`)
		updated := fmt.Sprint(int64(mustJSON(body)["secret"].(map[string]any)["updated_at"].(float64)))
		wantBody(t, "PUT of the same name", st, body, 200, `{"ok":true,"created":false,"secret":{"name":"RCON","created_at":`+created+`,"updated_at":`+updated+`}}`)
		if updated < created {
			t.Errorf("updated_at %s before created_at %s", updated, created)
		}
		st, _, body = h.do("GET", Prefix+"/secrets", h.token, nil)
		wantBody(t, "the list", st, body, 200, `{"secrets":[{"name":"RCON","created_at":`+created+`,"updated_at":`+updated+`}],"count":1}`)

		for _, c := range []struct{ name, body, want string }{
			{"1bad", `{"value":"x"}`, `{"error":"name: must be a letter or _, then letters, digits or _, at most 64 in all (as an environment variable's name)","code":"VALIDATION_ERROR","issues":[{"path":"name","message":"must be a letter or _, then letters, digits or _, at most 64 in all (as an environment variable's name)"}]}`},
			{"OK", `{}`, `{"error":"value: is required (1 to 16384 bytes)","code":"VALIDATION_ERROR","issues":[{"path":"value","message":"is required (1 to 16384 bytes)"}]}`},
			{"OK", `{"value":""}`, `{"error":"value: is required (1 to 16384 bytes)","code":"VALIDATION_ERROR","issues":[{"path":"value","message":"is required (1 to 16384 bytes)"}]}`},
			{"OK", `{"value":"` + strings.Repeat("v", 16385) + `"}`, `{"error":"value: must be at most 16384 bytes","code":"VALIDATION_ERROR","issues":[{"path":"value","message":"must be at most 16384 bytes"}]}`},
			{"OK", `{"value":"a\u0000b"}`, `{"error":"value: must be UTF-8 text without NUL bytes","code":"VALIDATION_ERROR","issues":[{"path":"value","message":"must be UTF-8 text without NUL bytes"}]}`},
			{"OK", `{"value":"x","name":"y"}`, `{"error":"name: unknown field","code":"VALIDATION_ERROR","issues":[{"path":"name","message":"unknown field"}]}`},
		} {
			st, body := put(c.name, c.body)
			wantBody(t, "PUT /secrets/"+c.name+" "+c.body[:min(len(c.body), 30)], st, body, 400, c.want)
		}

		// Another team: none of them, and its own of the same name.
		other := h.otherTeamToken()
		st, _, body = h.do("GET", Prefix+"/secrets", other, nil)
		wantBody(t, "another team's list", st, body, 200, `{"secrets":[],"count":0}`)
		st, _, body = h.do("DELETE", Prefix+"/secrets/RCON", other, nil)
		wantBody(t, "another team's DELETE", st, body, 404, `{"error":"secret not found","code":"NOT_FOUND"}`)
		if st, body := put("RCON", `{"value":"theirs"}`, other); st != 200 || mustJSON(body)["created"] != true {
			t.Errorf("another team's PUT of the name = %d %s, want its own created", st, body)
		}
		st, _, body = h.do("GET", Prefix+"/secrets", h.token, nil)
		wantBody(t, "the list after the other team's", st, body, 200, `{"secrets":[{"name":"RCON","created_at":`+created+`,"updated_at":`+updated+`}],"count":1}`)

		// The value: sealed in its table, nowhere else.
		var sealed string
		if err := db.Read().QueryRowContext(t.Context(), `SELECT s.sealed FROM team_secrets s JOIN teams t ON t.id = s.team_id
			WHERE t.name = 'default' AND s.name = 'RCON'`).Scan(&sealed); err != nil || !strings.HasPrefix(sealed, "v1:") || strings.Contains(sealed, value) {
			t.Errorf("stored value = %q, %v; want it sealed", sealed, err)
		}
		if strings.Contains(h.logs.String(), value) {
			t.Error("a log line holds the secret's value")
		}

		st, _, body = h.do("DELETE", Prefix+"/secrets/RCON", h.token, nil)
		wantBody(t, "DELETE", st, body, 200, `{"ok":true,"deleted":true}`)
		st, _, body = h.do("DELETE", Prefix+"/secrets/RCON", h.token, nil)
		wantBody(t, "DELETE again", st, body, 404, `{"error":"secret not found","code":"NOT_FOUND"}`)
		st, _, body = h.do("DELETE", Prefix+"/secrets/no-such", h.token, nil)
		wantBody(t, "DELETE of a bad name", st, body, 400, `{"error":"name: must be a letter or _, then letters, digits or _, at most 64 in all (as an environment variable's name)","code":"VALIDATION_ERROR","issues":[{"path":"name","message":"must be a letter or _, then letters, digits or _, at most 64 in all (as an environment variable's name)"}]}`)
	})
}
