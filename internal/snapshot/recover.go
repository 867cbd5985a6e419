package snapshot

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

// RecoverRoots finishes or undoes the restores a crash interrupted in the
// server roots under dir (<data-dir>/servers/<uuid>): kiln serve calls it
// at start, before any server starts and before the disk ledger's first
// walk (which removes Kiln's .kiln-tmp- leftovers, a restore's included).
// Only restore directories and journals Kiln made under names are run or
// removed (restore.Recover); look-alikes are left and logged once per
// root. A root it cannot recover is logged and left for the next start;
// its server's files stay as the journal left them (old or new tree per
// path). It returns the servers whose restore it finished (past its
// commit point), for their restore records (Service.RootsRecovered).
func RecoverRoots(ctx context.Context, dir string, names quota.TempNames, log *slog.Logger) (finished map[string]bool) {
	finished = map[string]bool{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Warn("snapshot recovery: read the server roots", "dir", dir, "err", err)
		}
		return finished
	}
	for _, e := range entries {
		if _, err := uuid.Parse(e.Name()); err != nil || !e.IsDir() {
			continue
		}
		root, err := files.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			log.Warn("snapshot recovery: open a server root", "server_id", e.Name(), "err", err)
			continue
		}
		rec, err := restore.Recover(ctx, root, names)
		root.Close()
		if len(rec.Foreign) > 0 {
			log.Warn("snapshot recovery: left entries named like Kiln's restore directories that Kiln did not make (a user's or a game server's; not run, not removed)",
				"server_id", e.Name(), "names", rec.Foreign)
		}
		if len(rec.Untrusted) > 0 {
			log.Error("snapshot recovery: left restore journals that do not verify (changed in the root, or an older Kiln's): not run; remove the directories once the server's files are checked",
				"server_id", e.Name(), "names", rec.Untrusted)
		}
		switch {
		case err != nil:
			log.Error("snapshot recovery: an interrupted restore could not be finished", "server_id", e.Name(), "err", err)
		case rec.Finished > 0:
			finished[e.Name()] = true
			log.Info("snapshot recovery: finished a restore a crash interrupted", "server_id", e.Name())
		case rec.Discarded > 0:
			log.Info("snapshot recovery: undid a restore a crash interrupted before its commit point", "server_id", e.Name())
		}
	}
	return finished
}
