package files

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// Servers is what file operations need of whoever keeps the servers
// (*servers.Service in kiln serve): the root of a team's server.
type Servers interface {
	// Access returns the server's root and, for a write, its disk ledger
	// (serverroot.ErrNotFound, ErrInstalling, ErrRestoring).
	Access(ctx context.Context, teamID, id string, write bool) (serverroot.Access, error)
	// DiskChanged makes the next write measure the root again.
	DiskChanged(id string)
}

// Writing is how every writer into a server's root writes (the files
// API, archives, remote downloads; next SFTP, snapshot restore, mod
// installs): it opens the root of a (an Access for a write) and runs op
// with a reservation of the server's disk ledger, which op grows before
// it writes and tells what it changed (the Root and Stager methods do
// both). The reservation is committed when op succeeds; when op fails it
// is released, and if op had changed something, the ledger is made stale
// so the next write measures the root again.
func Writing(a serverroot.Access, op func(r *Root, res *quota.Reservation) error) error {
	if a.Disk == nil {
		return errors.New("files: a write needs the server's disk ledger (Access with write)")
	}
	r, err := Open(a.Root)
	if err != nil {
		return err
	}
	defer r.Close()
	reserve := a.Disk.Reserve
	if a.Hold != nil {
		reserve = a.Hold.Reserve // the holder of a held root (a snapshot restore)
	}
	res, err := reserve(0)
	if err != nil {
		return heldIsRestoring(err)
	}
	if err := op(r, res); err != nil {
		if res.Change() != 0 {
			a.Disk.Stale()
		}
		res.Release()
		return err
	}
	res.Commit()
	return nil
}

// heldIsRestoring names quota.ErrHeld as the servers package does: a
// writer whose Access came before a snapshot restore held the root is
// refused as a new one is (serverroot.ErrRestoring).
func heldIsRestoring(err error) error {
	if errors.Is(err, quota.ErrHeld) {
		return serverroot.ErrRestoring
	}
	return err
}

// writing checks access to a team's server for a write and runs op as
// Writing does.
func (s *Service) writing(ctx context.Context, teamID, id string, op func(r *Root, res *quota.Reservation) error) error {
	a, err := s.servers.Access(ctx, teamID, id, true)
	if err != nil {
		return err
	}
	return Writing(a, op)
}

// Service runs file operations on a team's servers: it finds the root
// (404 for another team's server), opens it with the resolver, runs the
// operation and keeps the disk figure current. Paths given to it are the
// user's, not yet cleaned: every method cleans them, naming the request
// field in validation errors.
type Service struct {
	servers Servers
}

// NewService returns a Service over srv.
func NewService(srv Servers) *Service { return &Service{servers: srv} }

// Limits of the API (api.md §4).
const (
	MaxContents   = 10 << 20  // GET contents
	MaxWrite      = 100 << 20 // POST write
	MaxBatchFiles = 1000      // files in one rename, delete or chmod
	// SearchTimeout bounds one search; what was found by then is answered
	// (marked truncated).
	SearchTimeout = 10 * time.Second
)

// open checks access and opens the server's root.
func (s *Service) open(ctx context.Context, teamID, id string, write bool) (*Root, serverroot.Access, error) {
	a, err := s.servers.Access(ctx, teamID, id, write)
	if err != nil {
		return nil, a, err
	}
	r, err := Open(a.Root)
	if err != nil {
		return nil, a, err
	}
	return r, a, nil
}

// List lists one page of directory dir of a server: at most limit
// entries (1 to MaxListLimit), those after cursor (a Page's Next as the
// client got it; "" for the first page). Errors: *validate.Error naming
// "directory", "cursor" or "limit"; ErrNotFound, ErrNotDirectory; those
// of Servers.Access.
func (s *Service) List(ctx context.Context, teamID, id, dir, cursor string, limit int) (Page, error) {
	rel, err := Clean("directory", dir)
	if err != nil {
		return Page{}, err
	}
	after, err := ParseCursor("cursor", cursor)
	if err != nil {
		return Page{}, err
	}
	if limit < 1 || limit > MaxListLimit {
		return Page{}, validationf("limit", "must be an integer from 1 to %d", MaxListLimit)
	}
	r, _, err := s.open(ctx, teamID, id, false)
	if err != nil {
		return Page{}, err
	}
	defer r.Close()
	return r.ListPage(rel, after, limit)
}

// Download opens a regular file for streaming; the caller closes it.
func (s *Service) Download(ctx context.Context, teamID, id, file string) (*os.File, Entry, error) {
	rel, err := Clean("file", file)
	if err != nil {
		return nil, Entry{}, err
	}
	r, _, err := s.open(ctx, teamID, id, false)
	if err != nil {
		return nil, Entry{}, err
	}
	defer r.Close() // the open file stays valid without the root handle
	return r.OpenRead(rel)
}

// Write replaces a file with body atomically, creating parents.
func (s *Service) Write(ctx context.Context, teamID, id, file string, body io.Reader) (Entry, error) {
	rel, err := Clean("file", file)
	if err != nil {
		return Entry{}, err
	}
	if rel == "." {
		return Entry{}, ErrNotFile
	}
	var e Entry
	err = s.writing(ctx, teamID, id, func(r *Root, res *quota.Reservation) (err error) {
		e, err = r.write(rel, "", body, res, 0)
		return err
	})
	return e, err
}

// CreateDirectory creates name under root (and missing parents).
func (s *Service) CreateDirectory(ctx context.Context, teamID, id, root, name string) error {
	if name == "" {
		return validationf("name", "is required")
	}
	rel, err := Join("root", root, "name", name)
	if err != nil {
		return err
	}
	return s.writing(ctx, teamID, id, func(r *Root, res *quota.Reservation) error {
		return r.Mkdir(rel, res)
	})
}

// Move is one rename of a batch.
type Move struct{ From, To string }

// Rename applies moves (relative to root) in order. Every path is checked
// before anything moves; an operation that fails stops the batch, the
// moves before it stay done.
func (s *Service) Rename(ctx context.Context, teamID, id, root string, moves []Move) error {
	if err := batchSize(len(moves)); err != nil {
		return err
	}
	type pair struct{ from, to string }
	pairs := make([]pair, len(moves))
	for i, m := range moves {
		f, err := Join("root", root, fieldAt("files", i, "from"), m.From)
		if err != nil {
			return err
		}
		t, err := Join("root", root, fieldAt("files", i, "to"), m.To)
		if err != nil {
			return err
		}
		pairs[i] = pair{f, t}
	}
	r, _, err := s.open(ctx, teamID, id, true)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, p := range pairs {
		if err := r.Rename(p.from, p.to); err != nil {
			return err
		}
	}
	return nil
}

// Copy copies a regular file next to itself ("name copy.ext").
func (s *Service) Copy(ctx context.Context, teamID, id, location string) (Entry, error) {
	rel, err := Clean("location", location)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	err = s.writing(ctx, teamID, id, func(r *Root, res *quota.Reservation) (err error) {
		e, err = r.Copy(rel, res)
		return err
	})
	return e, err
}

// Delete removes files (relative to root), directories recursively.
func (s *Service) Delete(ctx context.Context, teamID, id, root string, names []string) error {
	if err := batchSize(len(names)); err != nil {
		return err
	}
	rels := make([]string, len(names))
	for i, n := range names {
		// Removable: a look-alike of Kiln's names that Kiln did not make
		// (it never removes those on its own) can be deleted by its owner.
		rel, err := JoinRemovable("root", root, fieldAt("files", i, ""), n)
		if err != nil {
			return err
		}
		if rel == "." {
			return validationf(fieldAt("files", i, ""), "names the server's root directory, which cannot be deleted")
		}
		rels[i] = rel
	}
	r, _, err := s.open(ctx, teamID, id, true)
	if err != nil {
		return err
	}
	defer r.Close()
	defer s.servers.DiskChanged(id)
	for _, rel := range rels {
		if err := r.Delete(rel); err != nil {
			return err
		}
	}
	return nil
}

// ModeChange is one chmod of a batch.
type ModeChange struct{ File, Mode string }

// Chmod sets permission bits of files (relative to root).
func (s *Service) Chmod(ctx context.Context, teamID, id, root string, changes []ModeChange) error {
	if err := batchSize(len(changes)); err != nil {
		return err
	}
	type change struct {
		rel  string
		mode fs.FileMode
	}
	cs := make([]change, len(changes))
	for i, c := range changes {
		rel, err := Join("root", root, fieldAt("files", i, "file"), c.File)
		if err != nil {
			return err
		}
		m, err := ParseMode(fieldAt("files", i, "mode"), c.Mode)
		if err != nil {
			return err
		}
		cs[i] = change{rel, m}
	}
	r, _, err := s.open(ctx, teamID, id, true)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, c := range cs {
		if err := r.Chmod(c.rel, c.mode); err != nil {
			return err
		}
	}
	return nil
}

// Search finds entries whose name matches pattern under directory: at
// most limit (1 to MaxResults); truncated reports that more matched, or
// that the depth or time bound was hit. Errors: *validate.Error naming
// "directory", "pattern" or "limit"; ErrNotFound, ErrNotDirectory; those
// of Servers.Access.
func (s *Service) Search(ctx context.Context, teamID, id, directory, pattern string, limit int) ([]Match, bool, error) {
	rel, err := Clean("directory", directory)
	if err != nil {
		return nil, false, err
	}
	m, err := NewMatcher("pattern", pattern)
	if err != nil {
		return nil, false, err
	}
	if limit < 1 || limit > MaxResults {
		return nil, false, validationf("limit", "must be an integer from 1 to %d", MaxResults)
	}
	r, _, err := s.open(ctx, teamID, id, false)
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, SearchTimeout)
	defer cancel()
	out, truncated, err := r.SearchLimit(ctx, rel, m, limit)
	if errors.Is(err, context.DeadlineExceeded) {
		return out, true, nil // the time bound: answer what was found
	}
	return out, truncated, err
}

func batchSize(n int) error {
	switch {
	case n == 0:
		return validationf("files", "must name at least one file")
	case n > MaxBatchFiles:
		return validationf("files", "must name at most %d files", MaxBatchFiles)
	}
	return nil
}
