package secrets

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

func newService(t *testing.T, db *store.DB) *Service {
	t.Helper()
	for _, team := range []string{"team_a", "team_b"} {
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
	}
	box, err := secretbox.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return New(db, box)
}

// TestSecrets: Put creates then replaces (created time kept), List names
// them without values, Values opens the ones asked, Delete removes; the
// database holds each value sealed, never in clear; another team sees,
// reads and deletes none of them.
func TestSecrets(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()
		clock := int64(1000)
		s.now = func() int64 { clock++; return clock }

		sc, created, err := s.Put(ctx, "team_a", "RCON", "first-value")
		if err != nil || !created || sc != (Secret{Name: "RCON", CreatedAt: 1001, UpdatedAt: 1001}) {
			t.Fatalf("Put = %+v, %v, %v", sc, created, err)
		}
		sc, created, err = s.Put(ctx, "team_a", "RCON", "second-value")
		if err != nil || created || sc != (Secret{Name: "RCON", CreatedAt: 1001, UpdatedAt: 1002}) {
			t.Fatalf("Put again = %+v, %v, %v; want replaced, created time kept", sc, created, err)
		}
		if _, _, err := s.Put(ctx, "team_a", "db_pass", "p\nw"); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, "team_a")
		if want := []Secret{{"RCON", 1001, 1002}, {"db_pass", 1003, 1003}}; err != nil || !slices.Equal(list, want) {
			t.Fatalf("List = %+v, %v; want %+v", list, err, want)
		}
		vals, err := s.Values(ctx, "team_a", []string{"RCON", "db_pass", "NONE"})
		if err != nil || fmt.Sprint(vals) != fmt.Sprint(map[string]string{"RCON": "second-value", "db_pass": "p\nw"}) {
			t.Fatalf("Values = %v, %v", vals, err)
		}
		rows, err := db.Read().QueryContext(ctx, `SELECT sealed FROM team_secrets`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var sealed string
			_ = rows.Scan(&sealed)
			if !strings.HasPrefix(sealed, "v1:") || strings.Contains(sealed, "value") {
				t.Errorf("stored %q, want it sealed", sealed)
			}
		}
		rows.Close()

		// Another team: nothing of team_a's.
		if list, _ := s.List(ctx, "team_b"); len(list) != 0 {
			t.Errorf("team_b's List = %v", list)
		}
		if vals, _ := s.Values(ctx, "team_b", []string{"RCON"}); len(vals) != 0 {
			t.Errorf("team_b's Values = %v", vals)
		}
		if err := s.Delete(ctx, "team_b", "RCON"); !errors.Is(err, ErrNotFound) {
			t.Errorf("team_b's Delete = %v, want ErrNotFound", err)
		}
		if _, created, err := s.Put(ctx, "team_b", "RCON", "theirs"); err != nil || !created {
			t.Errorf("team_b's Put = %v, %v; want its own created", created, err)
		}
		if vals, _ := s.Values(ctx, "team_a", []string{"RCON"}); vals["RCON"] != "second-value" {
			t.Errorf("team_a's value after team_b's Put = %q", vals["RCON"])
		}

		if err := s.Delete(ctx, "team_a", "RCON"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "team_a", "RCON"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete again = %v, want ErrNotFound", err)
		}
		if list, _ := s.List(ctx, "team_a"); len(list) != 1 || list[0].Name != "db_pass" {
			t.Errorf("List after Delete = %v", list)
		}
	})
}

// TestSecretRules: bad names and values are refused at their field, the
// message never quoting the value; a team keeps at most MaxSecrets.
func TestSecretRules(t *testing.T) {
	s := newService(t, storetest.SQLite(t))
	ctx := t.Context()
	for _, c := range []struct{ name, value, want string }{
		{"", "x", "name: must be a letter or _"},
		{"1ABC", "x", "name: must be a letter or _"},
		{"A-B", "x", "name: must be a letter or _"},
		{"A" + strings.Repeat("B", MaxName), "x", "name: must be a letter or _"},
		{"OK", "", "value: is required"},
		{"OK", strings.Repeat("v", MaxValue+1), "value: must be at most 16384 bytes"},
		{"OK", "bad\x00value", "value: must be UTF-8 text without NUL bytes"},
		{"OK", "bad\xffvalue", "value: must be UTF-8 text without NUL bytes"},
	} {
		_, _, err := s.Put(ctx, "team_a", c.name, c.value)
		ve, ok := errors.AsType[*validate.Error](err)
		if !ok || len(ve.Issues) != 1 || !strings.HasPrefix(ve.Issues[0].Path+": "+ve.Issues[0].Message, c.want) {
			t.Errorf("Put(%q, %.20q) = %v, want %s", c.name, c.value, err, c.want)
		}
		if c.value != "" && strings.Contains(err.Error(), c.value) {
			t.Errorf("Put's error quotes the value: %v", err)
		}
	}
	if _, _, err := s.Put(ctx, "team_a", "A"+strings.Repeat("B", MaxName-1), strings.Repeat("v", MaxValue)); err != nil {
		t.Errorf("Put at the limits = %v", err)
	}
	for i := 1; i < MaxSecrets; i++ {
		if _, _, err := s.Put(ctx, "team_a", fmt.Sprintf("S%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Put(ctx, "team_a", "ONE_MORE", "v"); !errors.Is(err, ErrTooMany) {
		t.Errorf("Put past %d = %v, want ErrTooMany", MaxSecrets, err)
	}
	if _, created, err := s.Put(ctx, "team_a", "S1", "replaced"); err != nil || created {
		t.Errorf("replacing at the limit = %v, %v; want replaced", created, err)
	}
}
