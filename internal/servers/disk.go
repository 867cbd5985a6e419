package servers

import (
	"context"

	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Disk is a server's disk limit and what its root holds (gameserver's).
type Disk = gameserver.Disk

// Root returns the absolute directory of one of the team's servers. Every
// user-named path below it must go through the files resolver, never be
// joined onto it by hand. Errors: ErrNotFound.
func (s *Service) Root(ctx context.Context, teamID, id string) (string, error) {
	if _, err := s.getLocal(ctx, teamID, id); err != nil {
		return "", err
	}
	return s.node.Root(id), nil
}

// Access is what an operation on a server's files needs: its root and, for
// a write, its disk ledger. It is serverroot's, which the node-local
// packages (files, archives, snapshot restore) import instead of this one
// and its database (serverroot's doc.go); the name stays here for the
// callers that already hold a *Service.
type Access = serverroot.Access

// Errors of a server's root, serverroot's very values (errors.Is matches
// either name): ErrNotFound (the server does not exist or belongs to
// another team), ErrInstalling (the operation must wait until the install
// ends), ErrRestoring (a snapshot is being restored into the server, Hold:
// writing to its files, starting it and reinstalling it wait until the
// restore ends), ErrSnapshotting (a reinstall of a server a snapshot is
// reading whole, Reading: its installer would change files under the
// walk).
var (
	ErrNotFound     = serverroot.ErrNotFound
	ErrInstalling   = serverroot.ErrInstalling
	ErrRestoring    = serverroot.ErrRestoring
	ErrSnapshotting = serverroot.ErrSnapshotting
)

// Access checks that one of the team's servers exists and returns its
// root; with write, also its disk ledger (limit set from disk_mb), and
// ErrInstalling while the installer writes into the root, ErrRestoring
// while a snapshot restore holds it (Hold). Errors: ErrNotFound,
// ErrInstalling, ErrRestoring.
//
// The ledger's figure is the last walk of the root plus Kiln's own
// commits since (gameserver.Host.Access says when it is walked again).
func (s *Service) Access(ctx context.Context, teamID, id string, write bool) (Access, error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return Access{}, err
	}
	return d.Access(ctx, id, write)
}

// Reader is a read of a server's root whole (Reading; gameserver's).
type Reader = gameserver.Reader

// ReadChange is what changed under a reading (Reader.Changed;
// gameserver's).
type ReadChange = gameserver.ReadChange

// What changed under a reading (gameserver's).
const (
	Unchanged     = gameserver.Unchanged
	StatusChanged = gameserver.StatusChanged
	FilesMoved    = gameserver.FilesMoved
)

// Reading marks one of the team's servers' root as being read whole (a
// snapshot's walk) until the Reader is released: a reinstall is refused
// meanwhile (ErrSnapshotting), and the Reader tells what changed since
// (gameserver.Host.Reading). Errors: ErrNotFound, ErrInstalling (an
// install or a reinstall is under way: read the root once it is done).
func (s *Service) Reading(ctx context.Context, teamID, id string) (*Reader, error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	return d.Reading(ctx, id)
}

// Held is a server's root held for one writer (Hold; gameserver's).
type Held = gameserver.Held

// Hold reserves a server's root for one writer, a snapshot restore: until
// Release, Access for writing answers ErrRestoring to every other caller
// (the files API, SFTP, downloads, installs of mods, the deployments
// executor), and Power's start and restart and Reinstall refuse with it
// too; a stop or a kill goes on (the restore stops the server itself,
// Held.Stop). It is held in the node's memory (gameserver.Host.Hold).
// Writers that keep their reservation open (an SFTP session's open files)
// are ended by the OnHold hooks, run once the hold is taken. Errors:
// ErrNotFound, ErrInstalling, ErrRestoring (held already).
func (s *Service) Hold(ctx context.Context, teamID, id string) (*Held, error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	h, err := d.Hold(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, fn := range s.onHold {
		fn(id)
	}
	return h, nil
}

// OnHold registers fn to run when a server's root is held (Hold), after
// the hold is taken: other packages end the writers they keep open on it
// (SFTP sessions), which would write into files the restore replaces.
// Call it before Run.
func (s *Service) OnHold(fn func(id string)) {
	s.onHold = append(s.onHold, fn)
}

// DiskChanged makes the next write measure the root again (after an
// operation whose effect on the size is not known, such as deleting a
// directory).
func (s *Service) DiskChanged(id string) { s.driver.DiskChanged(id) }

// DiskUsage measures one of the team's servers now (a walk of its root;
// symlinks are counted as links, never followed), records the figure as
// its latest disk sample and returns it with the limit. Errors:
// ErrNotFound.
func (s *Service) DiskUsage(ctx context.Context, teamID, id string) (Disk, error) {
	_, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return Disk{}, err
	}
	return d.DiskUsage(ctx, id)
}

// DiskUsage is what the tree at root costs against a disk limit
// (quota.Usage: files by block, directories and links one block each,
// symlinks never followed). A root that does not exist holds nothing.
func DiskUsage(root string) (int64, error) { return quota.Usage(root) }
