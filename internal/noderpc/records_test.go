package noderpc_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/noderpc"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestRecordsOnlyTheNodes: an agent reads and writes through the records
// endpoint the records of its own node's servers, and a server of
// another node is not found to it — read, listed or written — its record
// untouched. The node is what the node endpoint took from the caller's
// certificate (here a header stands in for it: TestServerOnAgent in
// cmd/kiln drives the real endpoint).
func TestRecordsOnlyTheNodes(t *testing.T) {
	db := storetest.SQLite(t)
	env := serverstest.New(t, db, serverstest.Options{})
	a, err := auth.NewService(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, _, err := a.Bootstrap(t.Context()); err != nil {
		t.Fatal(err)
	}
	tm, err := a.TeamByName(t.Context(), auth.BootstrapTeam)
	if err != nil {
		t.Fatal(err)
	}
	local, err := env.Service.Create(t.Context(), tm.ID, servers.NewServer{Name: "here", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, eventually.Within, "the local server installed", func() (bool, string) {
		sv, err := env.Service.Get(t.Context(), tm.ID, local.ID)
		return err == nil && sv.Status == servers.StatusOffline, sv.Status
	})
	// A server of node "far", as placement would record it there.
	const farID = "0b7c5e8e-1111-4222-8333-444455556666"
	if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb,
		cpu_percent, env, desired_state, created_at, updated_at) VALUES ($1, $2, 'far', 'kiln-test', 'latest', 'installing', 'far', 30000, 512, 1024, 100, '{}', 'stopped', 1, 1)`,
		farID, tm.ID); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(noderpc.RecordsHandler(func(r *http.Request) string { return r.Header.Get("X-Test-Node") }, env.Service.NodeRecords))
	defer ts.Close()
	as := func(node string) *noderpc.RecordsClient {
		c := &http.Client{Transport: headerTransport{node: node}, Timeout: 10 * time.Second}
		return &noderpc.RecordsClient{Client: func() *http.Client { return c }, Base: ts.URL}
	}
	far := as("far")
	ctx := t.Context()

	list, err := far.NodeServers(ctx, "local") // the node asked for is ignored: the caller's
	if err != nil || len(list) != 1 || list[0].ID != farID {
		t.Fatalf("far's NodeServers = %+v, %v; want its one server", list, err)
	}
	if rec, err := far.Server(ctx, farID); err != nil || rec.Node != "far" || rec.Status != "installing" {
		t.Fatalf("far reads its server: %+v, %v", rec, err)
	}
	if err := far.SetStatus(ctx, farID, gameserver.StatusOffline); err != nil {
		t.Fatalf("far records its server's status: %v", err)
	}
	if rec, _ := far.Server(ctx, farID); rec.Status != gameserver.StatusOffline {
		t.Errorf("far's server after SetStatus: %q, want offline", rec.Status)
	}

	// The local node's server is not far's.
	if _, err := far.Server(ctx, local.ID); !errors.Is(err, serverroot.ErrNotFound) {
		t.Errorf("far reads another node's server: %v, want ErrNotFound", err)
	}
	for name, write := range map[string]func() error{
		"SetStatus":     func() error { return far.SetStatus(ctx, local.ID, gameserver.StatusCrashed) },
		"SetDesired":    func() error { return far.SetDesired(ctx, local.ID, "running") },
		"InstallFailed": func() error { return far.InstallFailed(ctx, local.ID, "pwned") },
		"Reinstalling": func() error {
			return far.Reinstalling(ctx, local.ID, "kiln-test", "latest", map[string]string{"X": "y"})
		},
		"SetRuntimeRef":   func() error { return far.SetRuntimeRef(ctx, local.ID, "holder:1:2") },
		"ClearRuntimeRef": func() error { return far.ClearRuntimeRef(ctx, local.ID, "") },
	} {
		if err := write(); !errors.Is(err, serverroot.ErrNotFound) {
			t.Errorf("far's %s of another node's server: %v, want ErrNotFound", name, err)
		}
	}
	after, err := env.Service.Get(ctx, tm.ID, local.ID)
	if err != nil || after.Status != servers.StatusOffline || after.DesiredState != "stopped" || after.InstallError != nil || after.Software != "kiln-test" {
		t.Errorf("the local server after far's writes: %+v, %v; want it untouched", after, err)
	}
	// A status a node never records is refused.
	if err := far.SetStatus(ctx, farID, gameserver.StatusUnknown); err == nil {
		t.Error("far recorded status unknown")
	}
}

// headerTransport names the calling node as the node endpoint would.
type headerTransport struct{ node string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Node", h.node)
	return http.DefaultTransport.RoundTrip(r)
}
