package gameserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/runtime"
)

// Run recovers the node's servers after a start (a crash or kill -9
// included), then samples resources until ctx ends; then it stops what
// does not outlive kiln (a process runtime without holders), or every
// server with Options.StopServersOnExit, and waits for every background
// goroutine.
//
// Recovery sets every status to the truth before Recovered is closed, so
// kiln serve answers no request before that: a status stored by a kiln
// that was killed may be stale.
func (h *Host) Run(ctx context.Context) error {
	err := h.recoverAll(ctx)
	h.recoverErr = err
	close(h.recovered)
	if err != nil {
		return fmt.Errorf("recover servers: %w", err)
	}
	h.sample(ctx)
	h.shutdown()
	return nil
}

// recoverAll brings every server of this node back to a coherent state.
func (h *Host) recoverAll(ctx context.Context) error {
	all, err := h.records.NodeServers(ctx, h.node.Name())
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sv := range all {
		known[sv.ID] = true
		h.recoverOne(ctx, sv)
	}
	h.removeOrphanRoots(known)
	h.endOrphanHolders(ctx, known)
	return nil
}

// endOrphanHolders ends the game servers that run on under holders
// (process runtime) for servers this node no longer has (a record removed
// behind kiln's back): nothing would ever stop them.
func (h *Host) endOrphanHolders(ctx context.Context, known map[string]bool) {
	held, ok := h.node.Runtime().(interface{ HeldServers() ([]string, error) })
	if !ok {
		return
	}
	ids, err := held.HeldServers()
	if err != nil {
		h.log.Warn("list the servers' holders", "err", err)
		return
	}
	for _, id := range ids {
		if known[id] {
			continue
		}
		h.log.Warn("ending a game server of no server of this node", "server_id", id)
		if err := h.node.Runtime().Remove(ctx, id); err != nil {
			h.log.Warn("end a game server of no server of this node", "server_id", id, "err", err)
		}
	}
}

func (h *Host) recoverOne(ctx context.Context, sv Record) {
	l := h.liveOf(sv.ID)
	l.setStatus(sv.Status)
	if sv.Status == StatusInstalling {
		// The install was interrupted: run it again (installs are idempotent).
		h.said(sv, "server install resumed")
		h.goBackground(func(ctx context.Context) { h.install(ctx, sv.ID, sv.DesiredState == "running") })
		return
	}
	if sv.RuntimeRef != "" {
		spec, err := h.spec(sv)
		if err == nil {
			inst, err := h.node.Runtime().Adopt(ctx, spec, sv.RuntimeRef, l.console.add)
			if err == nil {
				l.console.add("[kiln] re-attached to the running server")
				if sv.DesiredState == "running" {
					h.said(sv, "server re-adopted: it ran on while kiln was down")
					h.attach(ctx, l, sv, inst)
					return
				}
				h.said(sv, "server re-adopted and being stopped: its desired state is stopped")
				h.attach(ctx, l, sv, inst)
				h.goBackground(func(ctx context.Context) { h.stop(ctx, sv.ID, false) })
				return
			}
			if !errors.Is(err, runtime.ErrNotAdoptable) {
				h.log.Warn("re-adopt failed", "server_id", sv.ID, "err", err)
			}
		}
		if err := h.records.ClearRuntimeRef(ctx, sv.ID, ""); err != nil {
			h.log.Warn("forget an instance not re-adopted", "server_id", sv.ID, "err", err)
		}
	}
	// A server that crashed past its restart budget stays crashed, across
	// restarts of kiln too; the user starts it by hand.
	if sv.DesiredState == "running" && sv.InstallError == nil && sv.Status != StatusCrashed {
		// Its instance is gone: until the start begins it is offline.
		h.said(sv, "server being started again: its desired state is running and nothing of it runs")
		_ = h.setStatus(ctx, sv.ID, StatusOffline)
		h.goBackground(func(ctx context.Context) { h.start(ctx, sv.ID) })
		return
	}
	switch {
	case sv.DesiredState != "running":
		h.said(sv, "server left stopped, as asked")
	case sv.InstallError != nil:
		h.said(sv, "server left stopped: its last install failed")
	default:
		h.said(sv, "server left crashed: it crashed past its restart budget; a start by hand brings it back")
	}
	if sv.Status != StatusOffline && sv.Status != StatusCrashed {
		_ = h.setStatus(ctx, sv.ID, StatusOffline)
	}
}

// said logs, at info level, one line saying what kiln serve did with a
// server at its start or its stop (issue 33: an operator reads in the
// log, one line a server, what a restart of kiln did to their servers).
func (h *Host) said(sv Record, what string) {
	h.log.Info(what, "server_id", sv.ID, "name", sv.Name)
}

// Recovered is closed once Run has brought every server's stored state in
// line with what runs (re-adopted, restarted or marked offline).
func (h *Host) Recovered() <-chan struct{} { return h.recovered }

// RecoveryFailed reports, once Recovered is closed, whether recovery
// failed (Run then returns why): kiln serve must not start serving.
func (h *Host) RecoveryFailed() bool { return h.recoverErr != nil }

// removeOrphanRoots deletes server root directories whose server is gone (a
// delete interrupted between the record and the files).
func (h *Host) removeOrphanRoots(known map[string]bool) {
	dir := filepath.Dir(h.node.Root("x"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := uuid.Parse(e.Name()); err != nil || !e.IsDir() || known[e.Name()] {
			continue
		}
		h.log.Info("removing files of a deleted server", "server_id", e.Name())
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// sample refreshes CPU, memory and disk figures until ctx ends.
func (h *Host) sample(ctx context.Context) {
	fast := time.NewTicker(h.opts.SampleInterval)
	defer fast.Stop()
	slow := time.NewTicker(h.opts.DiskInterval)
	defer slow.Stop()
	h.sampleDisk()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
			h.sampleInstances(ctx)
		case <-slow.C:
			h.sampleDisk()
		case id := <-h.remeasure:
			h.measureIfStale(id)
		}
	}
}

func (h *Host) snapshotLive() map[string]*live {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*live, len(h.live))
	for id, l := range h.live {
		out[id] = l
	}
	return out
}

func (h *Host) sampleInstances(ctx context.Context) {
	for _, l := range h.snapshotLive() {
		inst := l.instance()
		if inst == nil {
			continue
		}
		st, err := inst.Stats(ctx)
		if err != nil {
			continue
		}
		l.mu.Lock()
		l.res.CPU, l.res.MemoryBytes = st.CPU, st.MemoryBytes
		l.mu.Unlock()
	}
}

// measureIfStale walks a server's root unless a walk since the request
// (several writes may ask for the same one) made its figure fresh.
func (h *Host) measureIfStale(id string) {
	h.mu.Lock()
	l, ok := h.live[id]
	h.mu.Unlock()
	if !ok {
		return // deleted meanwhile
	}
	if time.Since(l.disk.Figures().WalkedAt) > h.opts.DiskFresh {
		_, _ = h.measure(id)
	}
}

func (h *Host) sampleDisk() {
	for id := range h.snapshotLive() {
		_, _ = h.measure(id)
	}
}

// ended waits for a supervised instance to end and reports whether it
// did. At shutdown an instance that runs on without kiln (under a holder,
// a docker container) is let go instead, its exit unrecorded: it runs on
// and the next kiln serve re-adopts it; unless Options.StopServersOnExit,
// as for instances that end with kiln, which are being stopped by
// shutdown, so they end.
func (h *Host) ended(id string, l *live, inst runtime.Instance) bool {
	select {
	case <-inst.Done():
		return true
	case <-h.ctx.Done():
	}
	select {
	case <-inst.Done():
		return true
	default:
	}
	if !h.stopsAtExit(inst) {
		return false
	}
	// Shutdown stops the instances it found; one a start attached after
	// that (a restart racing the shutdown) is stopped here, or it would
	// run on without kiln and be waited for forever.
	l.mu.Lock()
	l.stopAsked = inst
	if l.inst == inst {
		l.stopRequested = true
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.StopTimeout+5*time.Second)
	defer cancel()
	h.stopInstance(ctx, id, l, inst, false)
	<-inst.Done()
	return true
}

// outlives reports whether inst runs on once kiln has exited, as the
// instance says (runtime: held processes do, kiln's children do not); an
// instance that does not say is a container's, which does.
func outlives(inst runtime.Instance) bool {
	if o, ok := inst.(interface{ Outlives() bool }); ok {
		return o.Outlives()
	}
	return true
}

// stopsAtExit reports whether shutdown stops inst: it ends with kiln
// anyway, or Options.StopServersOnExit says to stop every server.
func (h *Host) stopsAtExit(inst runtime.Instance) bool {
	return h.opts.StopServersOnExit || !outlives(inst)
}

// shutdown stops background work. Servers that run on without kiln
// (holders, containers) keep running, unless Options.StopServersOnExit;
// those that would end with it (kiln's children), and every one with that
// option, are stopped gracefully and started again at the next start
// (their desired state stays "running").
func (h *Host) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.StopTimeout+5*time.Second)
	defer cancel()
	h.mu.Lock()
	all := maps.Clone(h.supervised)
	h.mu.Unlock()
	for inst, id := range all {
		if !h.stopsAtExit(inst) {
			select {
			case <-inst.Done():
				continue // ended already: nothing is left running
			default:
			}
			h.log.Info("server left running: it runs on without kiln and the next start re-adopts it", "server_id", id)
			continue
		}
		if h.opts.StopServersOnExit {
			h.log.Info("server being stopped: --stop-servers-on-exit; the next start starts it again", "server_id", id)
		} else {
			h.log.Info("server being stopped: its process ends with kiln; the next start starts it again", "server_id", id)
		}
		l := h.liveOf(id)
		l.mu.Lock()
		if l.inst == inst {
			l.stopRequested = true
		} else {
			h.log.Warn("stopping an instance that is no longer its server's", "server_id", id, "ref", inst.Ref())
		}
		l.stopAsked = inst
		l.mu.Unlock()
		if !h.track() {
			break // cannot happen: only this sets closed
		}
		go func() {
			defer h.wg.Done()
			h.stopInstance(ctx, id, l, inst, false)
		}()
	}
	h.cancel()
	h.wgMu.Lock()
	h.closed = true
	h.wgMu.Unlock()
	h.wg.Wait()
}
