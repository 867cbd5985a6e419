package deploy

import (
	"errors"
	"slices"
	"testing"

	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestApply: Apply pushes when the YAML changed and queues a run of the
// version, in one call; a repeated key answers its run and writes
// nothing; the key with another configuration is refused, that
// configuration left unpushed (its changed YAML included).
func TestApply(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		s := newService(t, db)
		q := runs.New(db, runs.Options{})
		ctx := t.Context()
		cfg, err := s.Create(ctx, "team_a", "network", "", yamlA)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Apply(ctx, q, "team_a", cfg.ID, "user:a", "Pushed by apply.", "k1")
		if err != nil || !a.Pushed || a.Replayed || a.Version.Number != 1 || a.Run.VersionID != a.Version.ID || a.Run.Status != runs.Queued {
			t.Fatalf("first Apply = %+v, %v; want version 1 pushed and its run queued", a, err)
		}
		again, err := s.Apply(ctx, q, "team_a", cfg.ID, "user:a", "Pushed by apply.", "k1")
		if err != nil || !again.Replayed || again.Pushed || again.Run.ID != a.Run.ID {
			t.Fatalf("replayed Apply = %+v, %v; want run %s replayed", again, err, a.Run.ID)
		}
		second, err := s.Apply(ctx, q, "team_a", cfg.ID, "user:a", "Pushed by apply.", "")
		if err != nil || second.Pushed || second.Replayed || second.Version.Number != 1 || second.Run.ID == a.Run.ID || second.Run.QueuePosition != 1 {
			t.Fatalf("unchanged Apply = %+v, %v; want a second run of version 1, nothing pushed", second, err)
		}

		other, err := s.Create(ctx, "team_a", "other", "", yamlB)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, q, "team_a", other.ID, "user:a", "Pushed by apply.", "k1"); !errors.Is(err, runs.ErrIdempotencyKeyReused) {
			t.Fatalf("Apply of another configuration with the key = %v, want ErrIdempotencyKeyReused", err)
		}
		if got, err := s.Get(ctx, "team_a", other.ID); err != nil || got.Latest != nil {
			t.Errorf("the other configuration after the refused apply: %+v, %v; want no version", got.Latest, err)
		}
		if _, err := s.Apply(ctx, q, "team_b", cfg.ID, "user:b", "", ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("Apply of another team's configuration = %v, want ErrNotFound", err)
		}
		if list, err := q.List(ctx, "team_a", "", "", 0); err != nil || len(list) != 2 {
			t.Errorf("runs = %d, %v; want 2", len(list), err)
		}
	})
}

// TestPushChecksPorts: a configuration whose proxy asks for a port the
// node no longer offers (kiln serve restarted with another --port-range)
// is refused at push and at apply, at the port's path, with nothing
// pushed or queued; the zero range checks nothing.
func TestPushChecksPorts(t *testing.T) {
	db := storetest.SQLite(t)
	s := newService(t, db)
	q := runs.New(db, runs.Options{})
	ctx := t.Context()
	yaml := "version: 1\nservers:\n  lobby: {software: paper, memory: 1G}\nproxies:\n  edge: {software: velocity, memory: 1G, port: 25600, servers: [lobby]}\n"
	cfg, err := s.Create(ctx, "team_a", "network", "", yaml)
	if err != nil {
		t.Fatal(err)
	}
	narrowed := New(db, s.cat, node.PortRange{First: 30000, Last: 30099})
	want := []string{"proxies.edge.port: must be within the node's port range 30000-30099"}
	if _, _, err := narrowed.Push(ctx, "team_a", cfg.ID, "user:a", ""); !slices.Equal(issuesOf(err), want) {
		t.Errorf("Push = %v, want the issues %v", err, want)
	}
	if _, err := narrowed.Apply(ctx, q, "team_a", cfg.ID, "user:a", "", ""); !slices.Equal(issuesOf(err), want) {
		t.Errorf("Apply = %v, want the issues %v", err, want)
	}
	if got, _ := s.Get(ctx, "team_a", cfg.ID); got.Latest != nil {
		t.Errorf("latest version after the refusals = %+v, want none", got.Latest)
	}
	if list, _ := q.List(ctx, "team_a", "", "", 0); len(list) != 0 {
		t.Errorf("%d runs after the refusals, want 0", len(list))
	}
	if _, created, err := New(db, s.cat, node.PortRange{}).Push(ctx, "team_a", cfg.ID, "user:a", ""); err != nil || !created {
		t.Errorf("Push without a range = %v, created %v; want pushed", err, created)
	}
}
