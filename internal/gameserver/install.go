package gameserver

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kilnhq/kiln/internal/catalog/install"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Install installs server id's software into its root in the background
// (its record says installing already: a server just made), then starts
// it if startAfter. The outcome is recorded (Records.Installed or
// InstallFailed); a failure leaves a clear reason in install_error.
func (h *Host) Install(id string, startAfter bool) {
	h.liveOf(id).setStatus(StatusInstalling)
	h.goBackground(func(ctx context.Context) { h.install(ctx, id, startAfter) })
}

// install runs the installer into the server's root and records the
// outcome. A failure leaves a clear reason in install_error; the installer
// itself never leaves a half-written artifact.
func (h *Host) install(ctx context.Context, id string, startAfter bool) {
	l := h.liveOf(id)
	l.op.Lock()
	defer l.op.Unlock()
	sv, err := h.getRetried(ctx, id)
	if err != nil {
		// Deleted, or shutting down: it stays installing, and the next
		// start's recovery installs it again.
		return
	}
	p, ok := h.catalog.Get(sv.Software)
	if !ok {
		h.installFailed(ctx, l, id, fmt.Errorf("software %q is not in the catalog", sv.Software))
		return
	}
	l.console.add(fmt.Sprintf("[kiln] installing %s %s", p.Name, sv.Version))
	// Remove cancels an install in flight instead of waiting for it.
	ictx, cancel := context.WithCancel(ctx)
	l.mu.Lock()
	l.cancelInstall = cancel
	l.mu.Unlock()
	defer func() {
		cancel()
		l.mu.Lock()
		l.cancelInstall = nil
		l.mu.Unlock()
	}()
	res, err := h.installer.Install(ictx, p, sv.Version, h.node.Root(id), sv.Env)
	if err != nil {
		if ictx.Err() != nil {
			return // deleted, or shutting down: the next start installs again
		}
		h.installFailed(ctx, l, id, err)
		return
	}
	// The software's config (listen address, settings from the
	// environment) exists from the install on, for the user to read and
	// edit before a first start; every start writes it again. A player
	// list that cannot be written yet (a name Mojang cannot be asked
	// about) does not fail the install: the install is fine, and the
	// start that needs the list says so.
	if err := h.configure(ctx, sv); err != nil {
		if _, players := errors.AsType[*install.PlayersError](err); !players {
			h.installFailed(ctx, l, id, err)
			return
		}
		l.console.add("[kiln] " + err.Error() + " (written again at every start)")
	}
	// The list shows what the install wrote now, not after the next
	// periodic disk walk; the first write still measures afresh (files may
	// be copied in beside Kiln before it).
	if _, err := h.measure(id); err != nil {
		h.log.Warn("measure disk after install", "server_id", id, "err", err)
	}
	h.DiskChanged(id)
	if err := h.records.Installed(ctx, id, res); err != nil {
		h.log.Error("record install", "server_id", id, "err", err)
		return
	}
	l.setStatus(StatusOffline)
	l.console.add(fmt.Sprintf("[kiln] installed %s %s", p.Name, res.Version))
	if startAfter {
		l.op.Unlock()
		h.start(ctx, id)
		l.op.Lock()
	}
}

func (h *Host) installFailed(ctx context.Context, l *live, id string, cause error) {
	reason := h.tell(id, cause)
	h.log.Warn("install failed", "server_id", id, "err", cause)
	l.console.add("[kiln] install failed: " + reason)
	if err := h.records.InstallFailed(ctx, id, reason); err != nil {
		h.log.Error("record install failure", "server_id", id, "err", err)
	}
	l.setStatus(StatusOffline)
}

// Reinstall reinstalls server id as software at version with env (the
// caller checked them, and that no install runs: its record is not
// installing), keeping world files: it is refused while a snapshot reads
// the root or a restore holds it, else recorded (Records.Reinstalling),
// and then, in the background, a running server is stopped, the installer
// runs, and the server is started again if startAfter. Errors:
// serverroot's ErrRestoring and ErrSnapshotting (a snapshot is reading the
// root: Reading), the records'.
func (h *Host) Reinstall(ctx context.Context, id, software, version string, env map[string]string, startAfter bool) error {
	// Checked and marked in one step with Reading and Hold: either the
	// snapshot reading the root or the restore holding it refuses this
	// reinstall, or it finds the mark.
	l := h.liveOf(id)
	l.mu.Lock()
	if l.isHeld() {
		l.mu.Unlock()
		return serverroot.ErrRestoring
	}
	if l.readers > 0 {
		l.mu.Unlock()
		return serverroot.ErrSnapshotting
	}
	l.reinstalling = true
	l.mu.Unlock()
	installed := false
	defer func() {
		if !installed {
			l.endReinstall()
		}
	}()
	if err := h.records.Reinstalling(ctx, id, software, version, env); err != nil {
		return err
	}
	l.setStatus(StatusInstalling)
	installed = true
	h.goBackground(func(ctx context.Context) {
		defer l.endReinstall()
		h.stop(ctx, id, false)
		// The stop recorded offline; the server is installing until the
		// install records its outcome.
		if err := h.setStatus(ctx, id, StatusInstalling); err != nil {
			h.log.Error("reinstall", "server_id", id, "err", err)
		}
		h.install(ctx, id, startAfter)
	})
	return nil
}

// Remove is the node's part of a delete before the record goes: desired
// state stopped, an install in flight cancelled, the server killed and its
// runtime state (a container, a holder) removed. Forget ends the rest once
// the record is gone. Errors: the records', the runtime's.
func (h *Host) Remove(ctx context.Context, id string) error {
	if err := h.setDesired(ctx, id, "stopped"); err != nil {
		return err
	}
	l := h.liveOf(id)
	l.mu.Lock()
	if l.cancelInstall != nil {
		l.cancelInstall()
	}
	l.mu.Unlock()
	h.stop(ctx, id, true)
	if err := h.node.Runtime().Remove(ctx, id); err != nil {
		return fmt.Errorf("remove runtime state of %s: %w", id, err)
	}
	return nil
}

// Forget is the node's part of a delete once the record is gone (after
// Remove): what the host keeps of the server, its console's streams
// (ended with a last status, "deleted"), its root and its user. The root
// goes after the record, so a crash between the two leaves only a root no
// record names, which Run removes at the next start.
func (h *Host) Forget(id string) {
	h.mu.Lock()
	l, ok := h.live[id]
	delete(h.live, id)
	h.mu.Unlock()
	if ok {
		l.console.end("deleted")
	}
	if err := os.RemoveAll(h.node.Root(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Error("remove server files", "server_id", id, "err", err)
	} else if h.users != nil {
		h.users.release(id) // its root is gone: the id is free
	}
}
