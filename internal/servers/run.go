package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/gameserver"
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
func (s *Service) Run(ctx context.Context) error {
	err := s.recoverAll(ctx)
	s.recoverErr = err
	close(s.recovered)
	if err != nil {
		return fmt.Errorf("recover servers: %w", err)
	}
	s.sample(ctx)
	s.shutdown()
	return nil
}

// recoverAll brings every server of this node back to a coherent state.
func (s *Service) recoverAll(ctx context.Context) error {
	all, err := s.records.NodeServers(ctx, s.node.Name())
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sv := range all {
		known[sv.ID] = true
		s.recoverOne(ctx, sv)
	}
	s.removeOrphanRoots(known)
	s.endOrphanHolders(ctx, known)
	return nil
}

// endOrphanHolders ends the game servers that run on under holders
// (process runtime) for servers this node no longer has (a row removed
// behind kiln's back): nothing would ever stop them.
func (s *Service) endOrphanHolders(ctx context.Context, known map[string]bool) {
	h, ok := s.node.Runtime().(interface{ HeldServers() ([]string, error) })
	if !ok {
		return
	}
	ids, err := h.HeldServers()
	if err != nil {
		s.log.Warn("list the servers' holders", "err", err)
		return
	}
	for _, id := range ids {
		if known[id] {
			continue
		}
		s.log.Warn("ending a game server of no server of this node", "server_id", id)
		if err := s.node.Runtime().Remove(ctx, id); err != nil {
			s.log.Warn("end a game server of no server of this node", "server_id", id, "err", err)
		}
	}
}

func (s *Service) recoverOne(ctx context.Context, sv gameserver.Record) {
	l := s.liveOf(sv.ID)
	l.setStatus(sv.Status)
	if sv.Status == StatusInstalling {
		// The install was interrupted: run it again (installs are idempotent).
		s.said(sv, "server install resumed")
		s.goBackground(func(ctx context.Context) { s.install(ctx, sv.ID, sv.DesiredState == "running") })
		return
	}
	if sv.RuntimeRef != "" {
		spec, err := s.spec(sv)
		if err == nil {
			inst, err := s.node.Runtime().Adopt(ctx, spec, sv.RuntimeRef, l.console.add)
			if err == nil {
				l.console.add("[kiln] re-attached to the running server")
				if sv.DesiredState == "running" {
					s.said(sv, "server re-adopted: it ran on while kiln was down")
					s.attach(ctx, l, sv, inst)
					return
				}
				s.said(sv, "server re-adopted and being stopped: its desired state is stopped")
				s.attach(ctx, l, sv, inst)
				s.goBackground(func(ctx context.Context) { s.stop(ctx, sv.ID, false) })
				return
			}
			if !errors.Is(err, runtime.ErrNotAdoptable) {
				s.log.Warn("re-adopt failed", "server_id", sv.ID, "err", err)
			}
		}
		if err := s.records.ClearRuntimeRef(ctx, sv.ID, ""); err != nil {
			s.log.Warn("forget an instance not re-adopted", "server_id", sv.ID, "err", err)
		}
	}
	// A server that crashed past its restart budget stays crashed, across
	// restarts of kiln too; the user starts it by hand.
	if sv.DesiredState == "running" && sv.InstallError == nil && sv.Status != StatusCrashed {
		// Its instance is gone: until the start begins it is offline.
		s.said(sv, "server being started again: its desired state is running and nothing of it runs")
		_ = s.setStatus(ctx, sv.ID, StatusOffline)
		s.goBackground(func(ctx context.Context) { s.start(ctx, sv.ID) })
		return
	}
	switch {
	case sv.DesiredState != "running":
		s.said(sv, "server left stopped, as asked")
	case sv.InstallError != nil:
		s.said(sv, "server left stopped: its last install failed")
	default:
		s.said(sv, "server left crashed: it crashed past its restart budget; a start by hand brings it back")
	}
	if sv.Status != StatusOffline && sv.Status != StatusCrashed {
		_ = s.setStatus(ctx, sv.ID, StatusOffline)
	}
}

// said logs, at info level, one line saying what kiln serve did with a
// server at its start or its stop (issue 33: an operator reads in the
// log, one line a server, what a restart of kiln did to their servers).
func (s *Service) said(sv gameserver.Record, what string) {
	s.log.Info(what, "server_id", sv.ID, "name", sv.Name)
}

// Recovered is closed once Run has brought every server's stored state in
// line with what runs (re-adopted, restarted or marked offline).
func (s *Service) Recovered() <-chan struct{} { return s.recovered }

// RecoveryFailed reports, once Recovered is closed, whether recovery
// failed (Run then returns why): kiln serve must not start serving.
func (s *Service) RecoveryFailed() bool { return s.recoverErr != nil }

// removeOrphanRoots deletes server root directories whose server is gone (a
// delete interrupted between the row and the files).
func (s *Service) removeOrphanRoots(known map[string]bool) {
	dir := filepath.Dir(s.node.Root("x"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := uuid.Parse(e.Name()); err != nil || !e.IsDir() || known[e.Name()] {
			continue
		}
		s.log.Info("removing files of a deleted server", "server_id", e.Name())
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// sample refreshes CPU, memory and disk figures until ctx ends.
func (s *Service) sample(ctx context.Context) {
	fast := time.NewTicker(s.opts.SampleInterval)
	defer fast.Stop()
	slow := time.NewTicker(s.opts.DiskInterval)
	defer slow.Stop()
	s.sampleDisk()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
			s.sampleInstances(ctx)
		case <-slow.C:
			s.sampleDisk()
		case id := <-s.remeasure:
			s.measureIfStale(id)
		}
	}
}

func (s *Service) snapshotLive() map[string]*live {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*live, len(s.live))
	for id, l := range s.live {
		out[id] = l
	}
	return out
}

func (s *Service) sampleInstances(ctx context.Context) {
	for _, l := range s.snapshotLive() {
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
func (s *Service) measureIfStale(id string) {
	s.mu.Lock()
	l, ok := s.live[id]
	s.mu.Unlock()
	if !ok {
		return // deleted meanwhile
	}
	if time.Since(l.disk.Figures().WalkedAt) > s.opts.DiskFresh {
		_, _ = s.measure(id)
	}
}

func (s *Service) sampleDisk() {
	for id := range s.snapshotLive() {
		_, _ = s.measure(id)
	}
}

// ended waits for a supervised instance to end and reports whether it
// did. At shutdown an instance that runs on without kiln (under a holder,
// a docker container) is let go instead, its exit unrecorded: it runs on
// and the next kiln serve re-adopts it; unless Options.StopServersOnExit,
// as for instances that end with kiln, which are being stopped by
// shutdown, so they end.
func (s *Service) ended(id string, l *live, inst runtime.Instance) bool {
	select {
	case <-inst.Done():
		return true
	case <-s.ctx.Done():
	}
	select {
	case <-inst.Done():
		return true
	default:
	}
	if !s.stopsAtExit(inst) {
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
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StopTimeout+5*time.Second)
	defer cancel()
	s.stopInstance(ctx, id, l, inst, false)
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
func (s *Service) stopsAtExit(inst runtime.Instance) bool {
	return s.opts.StopServersOnExit || !outlives(inst)
}

// shutdown stops background work. Servers that run on without kiln
// (holders, containers) keep running, unless Options.StopServersOnExit;
// those that would end with it (kiln's children), and every one with that
// option, are stopped gracefully and started again at the next start
// (their desired state stays "running").
func (s *Service) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StopTimeout+5*time.Second)
	defer cancel()
	s.mu.Lock()
	all := maps.Clone(s.supervised)
	s.mu.Unlock()
	for inst, id := range all {
		if !s.stopsAtExit(inst) {
			select {
			case <-inst.Done():
				continue // ended already: nothing is left running
			default:
			}
			s.log.Info("server left running: it runs on without kiln and the next start re-adopts it", "server_id", id)
			continue
		}
		if s.opts.StopServersOnExit {
			s.log.Info("server being stopped: --stop-servers-on-exit; the next start starts it again", "server_id", id)
		} else {
			s.log.Info("server being stopped: its process ends with kiln; the next start starts it again", "server_id", id)
		}
		l := s.liveOf(id)
		l.mu.Lock()
		if l.inst == inst {
			l.stopRequested = true
		} else {
			s.log.Warn("stopping an instance that is no longer its server's", "server_id", id, "ref", inst.Ref())
		}
		l.stopAsked = inst
		l.mu.Unlock()
		if !s.track() {
			break // cannot happen: only this sets closed
		}
		go func() {
			defer s.wg.Done()
			s.stopInstance(ctx, id, l, inst, false)
		}()
	}
	s.cancel()
	s.wgMu.Lock()
	s.closed = true
	s.wgMu.Unlock()
	s.wg.Wait()
	s.stmtMu.Lock()
	for _, st := range []**sql.Stmt{&s.listSt, &s.versionSt, &s.getSt} {
		if *st != nil {
			(*st).Close()
			*st = nil
		}
	}
	s.stmtMu.Unlock()
}
