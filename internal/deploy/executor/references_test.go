package executor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// tablesHolding names the tables of db with a text value containing
// needle, anywhere.
func tablesHolding(t *testing.T, db *store.DB, needle string) []string {
	t.Helper()
	ctx := t.Context()
	q := `SELECT name FROM sqlite_master WHERE type = 'table'`
	if db.Dialect() == store.Postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	rows, err := db.Read().QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	var out []string
	for _, table := range tables {
		rows, err := db.Read().QueryContext(ctx, `SELECT * FROM `+table)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		found := false
		for rows.Next() && !found {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("read %s: %v", table, err)
			}
			for _, v := range vals {
				var s string
				switch v := v.(type) {
				case string:
					s = v
				case []byte:
					s = string(v)
				default:
					s = fmt.Sprint(v)
				}
				found = found || strings.Contains(s, needle)
			}
		}
		rows.Close()
		if found {
			out = append(out, table)
		}
	}
	return out
}

// wiredNetwork's lobby has a plugin configuration wired to its database
// and to the servers' addresses.
const wiredNetwork = `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 256M
    disk: 1G
    files:
      - path: plugins/Stats/config.yml
        content: |
          url: ${dbservices.stats.jdbc_url}
          host: ${dbservices.stats.host}:${dbservices.stats.port}
          database: ${dbservices.stats.name}
          user: ${dbservices.stats.user}
          password: ${dbservices.stats.password}
          me: ${servers.lobby.address}
          hub: ${servers.hub.address}
          literal: $${servers.hub.address}
      - path: plugins/Hub/where.txt
        content: "hub at ${servers.hub.address}"
  hub:
    software: kiln-test
    memory: 256M
    disk: 1G
dbservices:
  stats:
    engine: postgres
`

// TestReferencesWired: a server's files reference its dbservice's
// credentials and the servers' addresses (its own, and hub's, which the
// plan makes first); the run writes the values, the file with the
// password 0600 and the other as usual; no table of Kiln's database
// holds the password in clear (versions, runs and the applied state keep
// the template and a digest); the same spec again changes nothing; a
// referenced value that changes (hub moved to another port) makes the
// plan update lobby, "references" its change, and the run writes the
// new value.
func TestReferencesWired(t *testing.T) {
	dsn := storetest.PostgresAdminURL(t)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		box, err := secretbox.Load(t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		dbs := dbservice.NewService(db, box, nil)
		if _, err := dbs.AddHost(ctx, "h1", dbservice.Postgres, dsn, ""); err != nil {
			t.Fatal(err)
		}
		e := newEnvWith(t, db, serverstest.Options{Servers: servers.Options{Injected: dbs}})
		x := e.startOpts(executor.Options{Owner: "inst_wire", Databases: dbs})

		cfgID, r := e.apply("", wiredNetwork)
		stats := dbservice.Owner{ConfigurationID: cfgID, ResourceKey: "dbservice/stats"}
		t.Cleanup(func() { _ = dbs.Drop(context.Background(), e.teamID, stats) })
		got := e.wait(r.ID)
		if got.Status != runs.Succeeded || got.Summary.Create != 3 {
			t.Fatalf("run = %s %s %q, %+v; want succeeded creating 3", got.Status, got.FailureClass, got.Error, got.Summary)
		}
		creds, err := dbs.Credentials(ctx, e.teamID, stats)
		if err != nil {
			t.Fatal(err)
		}
		owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID)
		lobby, hub := owned["server/lobby"], owned["server/hub"]
		root := e.srvEnv.Node.Root(lobby.ID)
		wantFile := func(rel, want string, mode os.FileMode) {
			t.Helper()
			b, err := os.ReadFile(filepath.Join(root, rel))
			fi, _ := os.Stat(filepath.Join(root, rel))
			if err != nil || string(b) != want || fi.Mode().Perm() != mode {
				t.Errorf("%s = %q (%v), %v\nwant %q (%v)", rel, b, fi.Mode().Perm(), err, want, mode)
			}
		}
		config := func(hubAddr string) string {
			return "url: " + creds.JDBCURL + "\nhost: " + creds.Host + ":" + creds.Port + "\ndatabase: " + creds.Name +
				"\nuser: " + creds.User + "\npassword: " + creds.Password + "\nme: " + lobby.Address + "\nhub: " + hubAddr +
				"\nliteral: ${servers.hub.address}\n"
		}
		wantFile("plugins/Stats/config.yml", config(hub.Address), 0o600)
		wantFile("plugins/Hub/where.txt", "hub at "+hub.Address, 0o644)
		if held := tablesHolding(t, db, creds.Password); len(held) != 0 {
			t.Errorf("the password is in clear in the tables %v", held)
		}
		live, _ := e.dep.Live(ctx, e.teamID, cfgID)
		for _, l := range live {
			if l.Key == "server/lobby" && !strings.Contains(string(l.Applied), `"references":"hmac-sha256:`) {
				t.Errorf("lobby's applied state = %s, want the digest of its references", l.Applied)
			}
		}

		// Nothing changed: nothing to do.
		if p, err := x.Plan(ctx, e.teamID, cfgID, nil); err != nil || p.Refusal != "" || p.Plan.Summary != (plan.Summary{Noop: 3}) {
			t.Fatalf("Plan of the applied spec = %+v, %v; want 3 unchanged", p, err)
		}
		// hub moves to another port: lobby's references changed.
		port := e.srvEnv.Node.Ports().First
		for port == hub.Port || port == lobby.Port {
			port++
		}
		moved, err := e.srv.UpdateOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/hub"}, servers.Change{Port: &port})
		if err != nil || moved.Address == hub.Address {
			t.Fatalf("move hub = %+v, %v", moved, err)
		}
		p, err := x.Plan(ctx, e.teamID, cfgID, nil)
		if err != nil || p.Refusal != "" || p.Plan.Summary != (plan.Summary{Update: 1, Noop: 2}) {
			t.Fatalf("Plan after hub moved = %+v, %v; want lobby updated", p, err)
		}
		for _, st := range p.Plan.Steps {
			if st.Key == "server/lobby" && (st.Action != plan.Update || strings.Join(st.Changes, ",") != "references") {
				t.Errorf("lobby's step = %s %v, want an update of its references", st.Action, st.Changes)
			}
		}
		_, r = e.apply(cfgID, wiredNetwork)
		if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 {
			t.Fatalf("run after hub moved = %s %q, %+v; want lobby updated", got.Status, got.Error, got.Summary)
		}
		wantFile("plugins/Stats/config.yml", config(moved.Address), 0o600)
		wantFile("plugins/Hub/where.txt", "hub at "+moved.Address, 0o644)
		if p, err := x.Plan(ctx, e.teamID, cfgID, nil); err != nil || p.Plan.Summary != (plan.Summary{Noop: 3}) {
			t.Errorf("Plan after the run = %+v, %v; want 3 unchanged", p.Plan.Summary, err)
		}
	})
}
