package archive

import (
	"context"
	"strconv"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// Service runs compress and decompress on a team's servers: it finds the
// root (404 for another team's server, 409 while installing), opens it
// with the resolver, cleans the user's paths (naming the request fields in
// validation errors) and writes through the server's disk ledger
// (files.Writing).
type Service struct {
	servers files.Servers
}

// NewService returns a Service over srv.
func NewService(srv files.Servers) *Service { return &Service{servers: srv} }

// Compress archives names (relative to root) into root in format ("" =
// tar.gz) and returns the archive's entry.
func (s *Service) Compress(ctx context.Context, teamID, id, root string, names []string, format string) (files.Entry, error) {
	f, err := ParseFormat("format", format)
	if err != nil {
		return files.Entry{}, err
	}
	dir, err := files.Clean("root", root)
	if err != nil {
		return files.Entry{}, err
	}
	switch {
	case len(names) == 0:
		return files.Entry{}, validateErr("files", "must name at least one file or directory")
	case len(names) > files.MaxBatchFiles:
		return files.Entry{}, validateErr("files", "must name at most %d files", files.MaxBatchFiles)
	}
	rels := make([]string, len(names))
	for i, n := range names {
		if rels[i], err = files.Join("root", root, fieldAt(i), n); err != nil {
			return files.Entry{}, err
		}
	}
	a, err := s.servers.Access(ctx, teamID, id, true)
	if err != nil {
		return files.Entry{}, err
	}
	var e files.Entry
	err = files.Writing(a, func(r *files.Root, res *quota.Reservation) (err error) {
		e, err = Compress(ctx, r, dir, rels, f, res)
		return err
	})
	return e, err
}

// Decompress extracts archive file (relative to root) into root.
func (s *Service) Decompress(ctx context.Context, teamID, id, root, file string) error {
	dir, err := files.Clean("root", root)
	if err != nil {
		return err
	}
	if file == "" {
		return validateErr("file", "is required")
	}
	rel, err := files.Join("root", root, "file", file)
	if err != nil {
		return err
	}
	a, err := s.servers.Access(ctx, teamID, id, true)
	if err != nil {
		return err
	}
	// Replaced files are not counted back while both copies exist: the
	// root is measured again before the next write.
	defer s.servers.DiskChanged(id)
	return files.Writing(a, func(r *files.Root, res *quota.Reservation) error {
		return Decompress(ctx, r, rel, dir, res)
	})
}

func validateErr(path, format string, args ...any) error {
	return validate.Errorf(path, format, args...)
}

func fieldAt(i int) string { return validate.Join("files", "["+strconv.Itoa(i)+"]") }
