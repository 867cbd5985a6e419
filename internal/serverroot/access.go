package serverroot

import (
	"errors"

	"github.com/kilnhq/kiln/internal/quota"
)

// Errors an operation on a server's root is refused with. The servers
// package answers them (servers.ErrNotFound and the others are these very
// values), and so does a node for the roots it holds (gameserver.Host),
// so errors.Is matches whichever side said it.
var (
	// ErrNotFound: the server does not exist, belongs to another team, or
	// is not held by the node asked.
	ErrNotFound = errors.New("server not found")
	// ErrInstalling: the operation must wait until the install ends.
	ErrInstalling = errors.New("the server is being installed")
	// ErrRestoring: a snapshot is being restored into the server (the
	// root is held, servers.Service.Hold): writing to its files, starting
	// it and reinstalling it wait until the restore ends.
	ErrRestoring = errors.New("a snapshot is being restored into the server")
	// ErrSnapshotting: a reinstall of a server a snapshot is reading
	// whole (servers.Service.Reading): its installer would change files
	// under the walk.
	ErrSnapshotting = errors.New("a snapshot of the server is being taken")
)

// Access is what an operation on a server's files needs: its root and, for
// a write, its disk ledger, from which every writer reserves before it
// writes (quota.Account). It names no team and no record: whoever grants
// it (gameserver.Host.Access, behind servers.Service.Access, which checks
// the team) has checked those.
type Access struct {
	Root string
	Disk *quota.Account // nil unless the access was for a write
	// Names are Kiln's temporary names in the root
	// (gameserver.Options.TempNames): how an operation finds the leftover
	// of its own crash.
	Names quota.TempNames
	// Hold is set on the holder's access (gameserver.Held.Access): while a
	// root is held its ledger refuses every other new reservation, and the
	// holder reserves through Hold (files.Writing does).
	Hold *quota.Hold
}
