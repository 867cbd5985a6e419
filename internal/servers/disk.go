package servers

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
)

// Disk is a server's disk limit and what its root holds, for the
// operations that write into the root (files, SFTP, snapshot restore):
// they check Free against the bytes they actually write.
type Disk struct {
	LimitBytes int64
	UsedBytes  int64
}

// Free is what may still be written before the limit; never negative.
func (d Disk) Free() int64 { return max(0, d.LimitBytes-d.UsedBytes) }

// Root returns the absolute directory of one of the team's servers. Every
// user-named path below it must go through the files resolver, never be
// joined onto it by hand. Errors: ErrNotFound.
func (s *Service) Root(ctx context.Context, teamID, id string) (string, error) {
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return "", err
	}
	return s.node.Root(id), nil
}

// DiskUsage measures one of the team's servers now (a walk of its root;
// symlinks are counted as links, never followed), records the figure as
// its latest disk sample and returns it with the limit. Errors:
// ErrNotFound.
func (s *Service) DiskUsage(ctx context.Context, teamID, id string) (Disk, error) {
	sv, err := s.Get(ctx, teamID, id)
	if err != nil {
		return Disk{}, err
	}
	used, err := DiskUsage(s.node.Root(id))
	if err != nil {
		return Disk{}, err
	}
	l := s.liveOf(id)
	l.mu.Lock()
	l.res.DiskBytes = used
	l.mu.Unlock()
	return Disk{LimitBytes: int64(sv.DiskMB) << 20, UsedBytes: used}, nil
}

// DiskUsage adds up the sizes of the regular files under root, without
// following symlinks. A root that does not exist holds nothing.
func DiskUsage(root string) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total, err
}
