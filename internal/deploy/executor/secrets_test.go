package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// secretNetwork takes its RCON password and a plugin's token from the
// team's secrets.
const secretNetwork = `version: 1
servers:
  lobby:
    software: kiln-test
    memory: 256M
    disk: 1G
    env: {RCON_PASSWORD: "${secrets.rcon}"}
    files:
      - path: plugins/Auth/token.txt
        content: "token=${secrets.api_token}"
`

// TestSecretsApplied: a spec referencing team secrets the team has not
// stored fails at planning, naming the first, before anything is made
// (and a plan says so); stored, the run gives the server its secret
// variable (sealed with the server, in server.properties, not in the
// process environment) and writes the file 0600 with the value; no
// table holds either value in clear; a secret set anew makes the plan
// update the server (its references) and the run write the new value.
func TestSecretsApplied(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		box, err := secretbox.Load(t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		sec := secrets.New(db, box)
		e := newEnvWith(t, db, serverstest.Options{Servers: servers.Options{Secrets: box}})
		x := e.startOpts(executor.Options{Owner: "inst_secrets", TeamSecrets: sec})

		cfgID, r := e.apply("", secretNetwork)
		const refusal = "servers.lobby.env.RCON_PASSWORD: ${secrets.rcon} names no secret of the team; store it with PUT /secrets/rcon (a run reads it when it applies the spec). Nothing was changed."
		if got := e.wait(r.ID); got.Status != runs.Failed || got.FailureClass != runs.FailValidation || got.Error != refusal {
			t.Fatalf("run without the secrets = %s %s %q; want failed, validation, %q", got.Status, got.FailureClass, got.Error, refusal)
		}
		if owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID); len(owned) != 0 {
			t.Fatalf("servers made by the refused run: %d", len(owned))
		}
		if p, err := x.Plan(ctx, e.teamID, cfgID, nil); err != nil || p.Refusal != refusal || p.Class != runs.FailValidation {
			t.Errorf("Plan without the secrets = %q %s, %v", p.Refusal, p.Class, err)
		}

		const rcon, token1, token2 = "rcon-pass-7f3a9c", "api-token-91b2e4", "api-token-c0ffee"
		for name, v := range map[string]string{"rcon": rcon, "api_token": token1} {
			if _, _, err := sec.Put(ctx, e.teamID, name, v); err != nil {
				t.Fatal(err)
			}
		}
		_, r = e.apply(cfgID, secretNetwork)
		if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Create != 1 {
			t.Fatalf("run with the secrets = %s %s %q", got.Status, got.FailureClass, got.Error)
		}
		lobby, err := e.srv.FindOwned(ctx, e.teamID, servers.Owner{ConfigurationID: cfgID, ResourceKey: "server/lobby"})
		if err != nil || lobby.Env["RCON_PASSWORD"] != rcon {
			t.Fatalf("lobby = %v, %v; want RCON_PASSWORD from the secret", lobby.Env, err)
		}
		root := e.srvEnv.Node.Root(lobby.ID)
		wantToken := func(want string) {
			t.Helper()
			b, err := os.ReadFile(filepath.Join(root, "plugins/Auth/token.txt"))
			fi, _ := os.Stat(filepath.Join(root, "plugins/Auth/token.txt"))
			if err != nil || string(b) != "token="+want || fi.Mode().Perm() != 0o600 {
				t.Errorf("token.txt = %q (%v), %v; want token=%s, 0600", b, fi.Mode().Perm(), err, want)
			}
		}
		wantToken(token1)
		if props, _ := os.ReadFile(filepath.Join(root, "server.properties")); !strings.Contains(string(props), "rcon.password="+rcon+"\n") {
			t.Errorf("server.properties lacks the RCON password:\n%s", props)
		}
		if env := processEnv(t, root); env["RCON_PASSWORD"] != "" {
			t.Error("the RCON password is in the process environment")
		}
		for _, v := range []string{rcon, token1} {
			if held := tablesHolding(t, db, v); len(held) != 0 {
				t.Errorf("%s is in clear in the tables %v", v, held)
			}
		}

		// The token set anew: lobby's references changed.
		if _, _, err := sec.Put(ctx, e.teamID, "api_token", token2); err != nil {
			t.Fatal(err)
		}
		p, err := x.Plan(ctx, e.teamID, cfgID, nil)
		if err != nil || p.Refusal != "" || len(p.Plan.Steps) != 1 || p.Plan.Steps[0].Action != plan.Update ||
			strings.Join(p.Plan.Steps[0].Changes, ",") != "references" {
			t.Fatalf("Plan after the token changed = %+v, %v; want lobby's references updated", p.Plan, err)
		}
		_, r = e.apply(cfgID, secretNetwork)
		if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 1 {
			t.Fatalf("run after the token changed = %s %q, %+v", got.Status, got.Error, got.Summary)
		}
		wantToken(token2)
		if p, err := x.Plan(ctx, e.teamID, cfgID, nil); err != nil || p.Plan.Summary != (plan.Summary{Noop: 1}) {
			t.Errorf("Plan after the run = %+v, %v; want nothing to do", p.Plan, err)
		}
	})
}
