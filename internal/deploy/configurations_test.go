package deploy

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

const yamlA = "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 2G\n"
const yamlB = "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 4G\n"

// testPorts are the node's game ports of the tests.
var testPorts = node.PortRange{First: 25565, Last: 25664}

func newService(t *testing.T, db *store.DB) *Service {
	t.Helper()
	cat, err := catalog.Load(false)
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"team_a", "team_b"} {
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
	}
	return New(db, cat, testPorts)
}

func issuesOf(err error) []string {
	var ve *validate.Error
	if !errors.As(err, &ve) {
		return nil
	}
	var out []string
	for _, is := range ve.Issues {
		out = append(out, is.Path+": "+is.Message)
	}
	return out
}

func TestConfigurations(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()

		cfg, err := s.Create(ctx, "team_a", "network", "the main one", yamlA)
		if err != nil {
			t.Fatalf("Create = %v", err)
		}
		if !strings.HasPrefix(cfg.ID, "cfg_") || cfg.ResourceCount != 1 || !strings.HasPrefix(cfg.SpecHash, "sha256:") || cfg.Latest != nil {
			t.Fatalf("Create = %+v", cfg)
		}
		// A broken spec is refused with its issues under yaml; the name
		// and description are checked too, all together.
		_, err = s.Create(ctx, "team_a", "", strings.Repeat("d", MaxDescription+1), "version: 1\nservers:\n  x:\n    software: nope\n    memory: 1G\n")
		if got := issuesOf(err); len(got) != 3 || got[0] != "name: is required" ||
			!strings.HasPrefix(got[1], "description: must be at most 1000") || !strings.HasPrefix(got[2], `servers.x.software: unknown software "nope"`) {
			t.Fatalf("Create(bad) issues = %q (%v)", got, err)
		}
		if _, err := s.Create(ctx, "team_a", "n", "", "version: 1\n x: 2\n"); len(issuesOf(err)) != 1 || !strings.HasPrefix(issuesOf(err)[0], "yaml: YAML syntax error at line 2, column") {
			t.Fatalf("Create(syntax error) = %v", err)
		}
		if _, err := s.Create(ctx, "team_a", "network", "", yamlA); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("Create(same name) = %v, want ErrNameTaken", err)
		}
		// Another team may use the name, and never sees the first team's.
		other, err := s.Create(ctx, "team_b", "network", "", yamlB)
		if err != nil {
			t.Fatalf("Create in another team = %v", err)
		}
		if _, err := s.Get(ctx, "team_b", cfg.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of another team's configuration = %v, want ErrNotFound", err)
		}
		if list, err := s.List(ctx, "team_a"); err != nil || len(list) != 1 || list[0].ID != cfg.ID {
			t.Fatalf("List = %+v, %v", list, err)
		}

		// Push: version 1, then nothing new while the spec is the same.
		v1, created, err := s.Push(ctx, "team_a", cfg.ID, "user:ada", "first")
		if err != nil || !created || v1.Number != 1 || v1.BaseVersionID != "" || v1.PushedBy != "user:ada" ||
			v1.SpecHash != cfg.SpecHash || v1.YAML != yamlA || !strings.HasPrefix(v1.ID, "ver_") {
			t.Fatalf("Push = %+v, %v, %v", v1, created, err)
		}
		again, created, err := s.Push(ctx, "team_a", cfg.ID, "user:ada", "again")
		if err != nil || created || again.ID != v1.ID || again.PushMessage != "first" {
			t.Fatalf("Push of an unchanged spec = %+v, %v, %v; want version 1, not created", again, created, err)
		}
		// An update that changes nothing leaves updated_at alone.
		s.now = func() int64 { return cfg.UpdatedAt + 1000 }
		desc := "the main one"
		if same, err := s.Update(ctx, "team_a", cfg.ID, Patch{Description: &desc}); err != nil || same.UpdatedAt != cfg.UpdatedAt {
			t.Fatalf("Update without a change = %+v, %v; want updated_at %d kept", same, err, cfg.UpdatedAt)
		}
		// A comment changes the YAML, not the spec: still nothing new.
		commented := "# lobby only\n" + yamlA
		if _, err := s.Update(ctx, "team_a", cfg.ID, Patch{YAML: &commented}); err != nil {
			t.Fatal(err)
		}
		if _, created, _ := s.Push(ctx, "team_a", cfg.ID, "user:ada", ""); created {
			t.Fatal("a comment made a new version")
		}
		b := yamlB
		name := "prod"
		upd, err := s.Update(ctx, "team_a", cfg.ID, Patch{YAML: &b, Name: &name})
		if err != nil || upd.Name != "prod" || upd.SpecHash == cfg.SpecHash || upd.Latest == nil || upd.Latest.ID != v1.ID {
			t.Fatalf("Update = %+v, %v", upd, err)
		}
		v2, created, err := s.Push(ctx, "team_b", cfg.ID, "user:eve", "")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Push by another team = %+v, %v, %v; want ErrNotFound", v2, created, err)
		}
		v2, created, err = s.Push(ctx, "team_a", cfg.ID, "agent:ci", strings.Repeat("é", MaxPushMessage))
		if err != nil || !created || v2.Number != 2 || v2.BaseVersionID != v1.ID || v2.YAML != yamlB {
			t.Fatalf("second Push = %+v, %v, %v", v2, created, err)
		}
		if _, _, err := s.Push(ctx, "team_a", cfg.ID, "agent:ci", strings.Repeat("x", MaxPushMessage+1)); len(issuesOf(err)) != 1 {
			t.Fatalf("Push with a long message = %v", err)
		}
		got, err := s.Get(ctx, "team_a", cfg.ID)
		if err != nil || got.Latest == nil || got.Latest.Number != 2 || got.Latest.SpecHash != v2.SpecHash {
			t.Fatalf("Get after two pushes = %+v, %v", got, err)
		}
		if v, err := s.Version(ctx, "team_a", cfg.ID, 1); err != nil || v.YAML != yamlA {
			t.Fatalf("Version(1) = %+v, %v", v, err)
		}
		if _, err := s.Version(ctx, "team_a", cfg.ID, 3); !errors.Is(err, ErrVersionNotFound) {
			t.Fatalf("Version(3) = %v", err)
		}
		if _, err := s.Version(ctx, "team_b", cfg.ID, 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Version by another team = %v", err)
		}
		// Renaming onto another configuration's name is refused.
		if _, err := s.Create(ctx, "team_a", "staging", "", yamlA); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, "team_a", cfg.ID, Patch{Name: ptr("staging")}); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("rename onto a taken name = %v", err)
		}

		// Delete: refused while a server of the configuration exists.
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO servers (id, team_id, name, software, version, status, node, port,
			memory_mb, disk_mb, cpu_percent, configuration_id, created_at, updated_at)
			VALUES ('00000000-0000-4000-8000-000000000001', 'team_a', 'lobby', 'paper', 'latest', 'offline', 'local', 30001,
			1024, 1024, 100, $1, 1, 1)`, cfg.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "team_a", cfg.ID); !errors.Is(err, ErrInUse) {
			t.Fatalf("Delete while it owns a server = %v, want ErrInUse", err)
		}
		if _, err := db.Write().ExecContext(ctx, `DELETE FROM servers`); err != nil {
			t.Fatal(err)
		}
		// Refused while a run of it is queued (or executing); a finished
		// run goes with it.
		v, _, err := s.Push(ctx, "team_a", cfg.ID, "user:test", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO runs (id, team_id, configuration_id, version_id, status, created_by, created_at, updated_at)
			VALUES ('run_1', 'team_a', $1, $2, 'queued', 'user:test', 1, 1)`, cfg.ID, v.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "team_a", cfg.ID); !errors.Is(err, ErrBusy) {
			t.Fatalf("Delete with a queued run = %v, want ErrBusy", err)
		}
		if _, err := db.Write().ExecContext(ctx, `UPDATE runs SET status = 'succeeded'`); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "team_b", cfg.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Delete by another team = %v", err)
		}
		if err := s.Delete(ctx, "team_a", cfg.ID); err != nil {
			t.Fatalf("Delete = %v", err)
		}
		if _, err := s.Get(ctx, "team_a", cfg.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete = %v", err)
		}
		var n int
		if err := db.Read().QueryRowContext(ctx, `SELECT count(*) FROM configuration_versions WHERE configuration_id = $1`, cfg.ID).Scan(&n); err != nil || n != 0 {
			t.Fatalf("versions left after Delete: %d, %v", n, err)
		}
		if _, err := s.Get(ctx, "team_b", other.ID); err != nil {
			t.Fatalf("the other team's configuration after Delete: %v", err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestVersionsPages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()
		cfg, err := s.Create(ctx, "team_a", "n", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			y := yamlA + "    cpu: " + []string{"10", "20", "30", "40", "50"}[i] + "\n"
			if _, err := s.Update(ctx, "team_a", cfg.ID, Patch{YAML: &y}); err != nil {
				t.Fatal(err)
			}
			if _, created, err := s.Push(ctx, "team_a", cfg.ID, "user:a", ""); err != nil || !created {
				t.Fatalf("Push %d = %v, %v", i, created, err)
			}
		}
		var got []int
		cursor := ""
		for page := 0; ; page++ {
			vs, next, err := s.Versions(ctx, "team_a", cfg.ID, 2, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				got = append(got, v.Number)
			}
			if next == "" {
				break
			}
			if page > 5 {
				t.Fatal("pages never end")
			}
			cursor = next
		}
		if want := []int{5, 4, 3, 2, 1}; !slices.Equal(got, want) {
			t.Fatalf("versions by pages of 2 = %v, want %v", got, want)
		}
		if vs, next, err := s.Versions(ctx, "team_a", cfg.ID, 0, ""); err != nil || len(vs) != 5 || next != "" {
			t.Fatalf("default page = %d versions, next %q, %v", len(vs), next, err)
		}
		for _, bad := range []struct {
			limit  int
			cursor string
		}{{201, ""}, {-1, ""}, {10, "x"}, {10, "v0"}, {10, "v-3"}} {
			if _, _, err := s.Versions(ctx, "team_a", cfg.ID, bad.limit, bad.cursor); len(issuesOf(err)) != 1 {
				t.Errorf("Versions(%d, %q) = %v, want one issue", bad.limit, bad.cursor, err)
			}
		}
	})
}

// TestConcurrentPushes: pushes racing on one configuration make one
// version each for distinct specs and never two with one number.
func TestConcurrentPushes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()
		cfg, err := s.Create(ctx, "team_a", "n", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		created := make(chan bool, 8)
		for range 8 {
			wg.Go(func() {
				_, c, err := s.Push(ctx, "team_a", cfg.ID, "user:a", "")
				if err != nil {
					t.Errorf("Push = %v", err)
				}
				created <- c
			})
		}
		wg.Wait()
		close(created)
		n := 0
		for c := range created {
			if c {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d of 8 concurrent pushes of one spec created a version, want 1", n)
		}
	})
}

func TestDiff(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()
		cfg, err := s.Create(ctx, "team_a", "n", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Diff(ctx, "team_a", cfg.ID, 0, 0); !errors.Is(err, ErrNotPushed) {
			t.Fatalf("Diff before a push = %v, want ErrNotPushed", err)
		}
		if _, _, err := s.Push(ctx, "team_a", cfg.ID, "user:a", ""); err != nil {
			t.Fatal(err)
		}
		d, err := s.Diff(ctx, "team_a", cfg.ID, 0, 0)
		if err != nil || d.From != 0 || d.To != 1 || d.Added != 5 || d.Removed != 0 || !strings.Contains(d.Unified, "+++ v1.yaml") {
			t.Fatalf("Diff of the first version = %+v, %v", d, err)
		}
		b := yamlB
		if _, err := s.Update(ctx, "team_a", cfg.ID, Patch{YAML: &b}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Push(ctx, "team_a", cfg.ID, "user:a", ""); err != nil {
			t.Fatal(err)
		}
		d, err = s.Diff(ctx, "team_a", cfg.ID, 0, 0)
		want := "--- v1.yaml\n+++ v2.yaml\n@@ -2,4 +2,4 @@\n servers:\n   lobby:\n     software: paper\n-    memory: 2G\n+    memory: 4G\n"
		if err != nil || d.From != 1 || d.To != 2 || d.Added != 1 || d.Removed != 1 || d.Unified != want || d.Truncated {
			t.Fatalf("Diff(1, 2) = %+v, %v\nwant unified %q", d, err, want)
		}
		if d, err := s.Diff(ctx, "team_a", cfg.ID, 2, 2); err != nil || d.Unified != "" || d.Added+d.Removed != 0 {
			t.Fatalf("Diff(2, 2) = %+v, %v", d, err)
		}
		if d, err := s.Diff(ctx, "team_a", cfg.ID, 2, 1); err != nil || d.Added != 1 || !strings.Contains(d.Unified, "+    memory: 2G") {
			t.Fatalf("Diff(2, 1) = %+v, %v", d, err)
		}
		if _, err := s.Diff(ctx, "team_a", cfg.ID, 7, 0); !errors.Is(err, ErrVersionNotFound) {
			t.Fatalf("Diff(7) = %v", err)
		}
		if _, err := s.Diff(ctx, "team_b", cfg.ID, 0, 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Diff by another team = %v", err)
		}
		if _, err := s.Diff(ctx, "team_a", cfg.ID, -1, 0); len(issuesOf(err)) != 1 {
			t.Fatalf("Diff(-1) = %v", err)
		}
	})
}

// TestCreateSameNameRacing: creates of one name racing (on PostgreSQL they
// can all pass the name check before any commits) end with one
// configuration and ErrNameTaken for the rest — the unique index's
// refusal recognised by its code, never an internal error.
func TestCreateSameNameRacing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		var wg sync.WaitGroup
		var mu sync.Mutex
		created, taken := 0, 0
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Create(t.Context(), "team_a", "racing", "", yamlA)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case errors.Is(err, ErrNameTaken):
					taken++
				default:
					t.Errorf("racing Create = %v, want nil or ErrNameTaken", err)
				}
			}()
		}
		wg.Wait()
		if created != 1 || taken != 11 {
			t.Errorf("12 racing creates of one name: %d created, %d taken; want 1 and 11", created, taken)
		}
	})
}

// TestLiteralSecrets: a value written literally in a variable the
// software keeps secret (RCON_PASSWORD) is refused when a spec is saved
// (create, update) or planned as an edit, with a sentence pointing to
// team secrets; ${secrets.NAME} there is accepted. A configuration saved
// before the rule keeps pushing: its runs apply it as before.
func TestLiteralSecrets(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		ctx := t.Context()
		const literal = "version: 1\nservers:\n  lobby:\n    software: paper\n    memory: 2G\n    env: {ENABLE_RCON: true, RCON_PASSWORD: hunter2}\n"
		const want = `servers.lobby.env.RCON_PASSWORD: RCON_PASSWORD is a secret, and a spec is kept in clear in every version of its configuration: store the value as a team secret (PUT /secrets/NAME {"value": …}) and write ${secrets.NAME} here`
		_, err := s.Create(ctx, "team_a", "network", "", literal)
		if got := issuesOf(err); len(got) != 1 || got[0] != want {
			t.Fatalf("Create with a literal secret = %q, want %q", got, want)
		}
		cfg, err := s.Create(ctx, "team_a", "network", "", strings.Replace(literal, "hunter2", `"${secrets.rcon}"`, 1))
		if err != nil {
			t.Fatalf("Create with a reference = %v", err)
		}
		if _, err := s.Update(ctx, "team_a", cfg.ID, Patch{YAML: new(literal)}); len(issuesOf(err)) != 1 || issuesOf(err)[0] != want {
			t.Errorf("Update to a literal secret = %v", err)
		}
		if _, err := s.Check(ctx, "team_a", cfg.ID, literal); len(issuesOf(err)) != 1 || issuesOf(err)[0] != want {
			t.Errorf("Check of a literal secret = %v", err)
		}
		// Saved before the rule: the row as it was written then.
		if _, err := db.Write().ExecContext(ctx, `UPDATE configurations SET yaml = $1, spec_hash = 'sha256:before' WHERE id = $2`, literal, cfg.ID); err != nil {
			t.Fatal(err)
		}
		if v, created, err := s.Push(ctx, "team_a", cfg.ID, "user:test", ""); err != nil || !created || v.YAML != literal {
			t.Errorf("Push of a configuration saved before = %+v, %v, %v; want pushed as it is", v, created, err)
		}
	})
}
