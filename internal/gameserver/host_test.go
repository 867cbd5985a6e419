package gameserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// memRecords keeps records in memory, each as the JSON a control plane
// would send an agent: the Host must need nothing else of them.
type memRecords struct {
	mu   sync.Mutex
	recs map[string][]byte
}

// update applies fn to record id; a record that is gone is left so, as
// Records' writes do.
func (m *memRecords) update(id string, fn func(*gameserver.Record)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.recs[id]
	if !ok {
		return nil
	}
	var r gameserver.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	fn(&r)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	m.recs[id] = b
	return nil
}

func (m *memRecords) Server(_ context.Context, id string) (gameserver.Record, error) {
	m.mu.Lock()
	b, ok := m.recs[id]
	m.mu.Unlock()
	if !ok {
		return gameserver.Record{}, serverroot.ErrNotFound
	}
	var r gameserver.Record
	err := json.Unmarshal(b, &r)
	return r, err
}

func (m *memRecords) NodeServers(ctx context.Context, n string) ([]gameserver.Record, error) {
	m.mu.Lock()
	var ids []string
	for id := range m.recs {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var out []gameserver.Record
	for _, id := range ids {
		r, err := m.Server(ctx, id)
		if err == nil && r.Node == n {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *memRecords) SetStatus(_ context.Context, id, status string) error {
	return m.update(id, func(r *gameserver.Record) { r.Status = status })
}

func (m *memRecords) SetDesired(_ context.Context, id, desired string) error {
	return m.update(id, func(r *gameserver.Record) { r.DesiredState = desired })
}

func (m *memRecords) Installed(_ context.Context, id string, res catalog.Result) error {
	return m.update(id, func(r *gameserver.Record) {
		r.Version, r.JavaMajor, r.Jar, r.ArgsFile = res.Version, res.JavaMajor, res.Jar, res.ArgsFile
		r.InstallError, r.Status = nil, gameserver.StatusOffline
	})
}

func (m *memRecords) InstallFailed(_ context.Context, id, reason string) error {
	return m.update(id, func(r *gameserver.Record) { r.InstallError, r.Status = &reason, gameserver.StatusOffline })
}

func (m *memRecords) Reinstalling(_ context.Context, id, software, version string, env map[string]string) error {
	return m.update(id, func(r *gameserver.Record) {
		r.Software, r.Version, r.Env = software, version, env
		r.InstallError, r.Status = nil, gameserver.StatusInstalling
	})
}

func (m *memRecords) SetRuntimeRef(_ context.Context, id, ref string) error {
	return m.update(id, func(r *gameserver.Record) { r.RuntimeRef = ref })
}

func (m *memRecords) ClearRuntimeRef(_ context.Context, id, ref string) error {
	return m.update(id, func(r *gameserver.Record) {
		if ref == "" || r.RuntimeRef == ref {
			r.RuntimeRef = ""
		}
	})
}

// TestHostWithoutDatabase runs a kiln-test server on a Host whose records
// are JSON in memory, as an agent's will come from the control plane:
// install and start, a command, a stop of the Host (a process without a
// holder ends with it) and a second Host that starts it again, since its
// desired state is running; then a delete's two calls remove its root.
func TestHostWithoutDatabase(t *testing.T) {
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	n, err := node.NewLocal("here", filepath.Join(dir, "servers"), ports, runtime.NewProcess(log))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := install.New(install.Options{CacheDir: filepath.Join(dir, "cache"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	opts := gameserver.Options{
		KilnBinary: serverstest.KilnBinary(t), PublicHost: "127.0.0.1", BindHost: "127.0.0.1",
		PingInterval: 50 * time.Millisecond, StopTimeout: 10 * time.Second,
	}
	id := uuid.NewString()
	rec, err := json.Marshal(gameserver.Record{ID: id, Name: "s", Software: "kiln-test", Version: "latest",
		Status: gameserver.StatusInstalling, DesiredState: "running", Node: "here", Port: ports.First,
		MemoryMB: 256, DiskMB: 1024, CPUPercent: 100})
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{recs: map[string][]byte{}}
	// run starts a Host and returns it with the function that stops it
	// as kiln's shutdown does.
	run := func() (*gameserver.Host, func()) {
		h := gameserver.New(recs, n, cat, inst, opts, log)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		<-h.Recovered()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return h, stop
	}
	waitStatus := func(h *gameserver.Host, want string) {
		t.Helper()
		eventually.True(t, eventually.Within, "status "+want, func() (bool, string) {
			r, err := recs.Server(t.Context(), id)
			if err != nil {
				t.Fatalf("Server(%s) = %v", id, err)
			}
			lines, _ := h.Console(t.Context(), id, 50)
			return r.Status == want, "status " + r.Status + ", console:\n" + strings.Join(lines, "\n")
		})
	}

	h, stop := run()
	// A server made as the control plane makes one: its root, its record
	// (installing), then the install.
	if err := os.Mkdir(n.Root(id), 0o750); err != nil {
		t.Fatal(err)
	}
	recs.mu.Lock()
	recs.recs[id] = rec
	recs.mu.Unlock()
	h.Install(id, true)
	waitStatus(h, gameserver.StatusRunning)
	if err := h.Command(t.Context(), id, "say hello"); err != nil {
		t.Fatalf("Command = %v", err)
	}
	if err := h.Command(t.Context(), id, "say a\nstop"); err == nil {
		t.Error("Command of two lines accepted")
	}
	if got := h.Resources(id).UptimeMS; got <= 0 {
		t.Errorf("Resources(%s).UptimeMS = %d, want > 0 for a running server", id, got)
	}
	stop() // the process runtime without holders: its servers end with the host
	if r, _ := recs.Server(t.Context(), id); r.Status != gameserver.StatusOffline || r.DesiredState != "running" || r.RuntimeRef != "" {
		t.Errorf("after the host's stop: status %q, desired %q, runtime ref %q; want offline, running, none", r.Status, r.DesiredState, r.RuntimeRef)
	}

	h, _ = run()
	waitStatus(h, gameserver.StatusRunning)
	lines, _ := h.Console(t.Context(), id, 2000)
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "[kiln] starting kiln-test") }) {
		t.Errorf("the second host's console does not say it started the server:\n%s", strings.Join(lines, "\n"))
	}
	if err := h.Remove(t.Context(), id); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	if r, _ := recs.Server(t.Context(), id); r.DesiredState != "stopped" {
		t.Errorf("after Remove: desired %q, want stopped", r.DesiredState)
	}
	recs.mu.Lock()
	delete(recs.recs, id) // the record goes between the two calls
	recs.mu.Unlock()
	h.Forget(id)
	if _, err := os.Stat(n.Root(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root after Forget: %v, want it gone", err)
	}
}
