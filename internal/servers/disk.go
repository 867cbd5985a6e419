package servers

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"time"
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

// Access is what an operation on a server's files needs: its root and, for
// a write, how many bytes it may still add before the disk limit.
type Access struct {
	Root string
	Free int64
}

// Access checks that one of the team's servers exists and returns its
// root; with write, also its free space, and ErrInstalling while the
// installer writes into the root. Errors: ErrNotFound, ErrInstalling.
//
// The free space is the last walk of the root plus Kiln's own writes since
// (Wrote). A figure older than Options.DiskFresh is walked again in the
// background, which also catches what the game server itself wrote; the
// write that finds it stale does not wait for that walk (a world of 20,000
// files takes tens of ms to walk, and every save in a file manager would
// pay it). Only a server never measured, or whose figure an operation of
// unknown effect invalidated (DiskChanged), is walked before the write.
func (s *Service) Access(ctx context.Context, teamID, id string, write bool) (Access, error) {
	sv, err := s.Get(ctx, teamID, id)
	if err != nil {
		return Access{}, err
	}
	a := Access{Root: s.node.Root(id)}
	if !write {
		return a, nil
	}
	if sv.Status == StatusInstalling {
		return Access{}, ErrInstalling
	}
	l := s.liveOf(id)
	l.mu.Lock()
	used, at := l.res.DiskBytes, l.diskAt
	l.mu.Unlock()
	switch {
	case at.IsZero():
		if used, err = s.measure(id); err != nil {
			return Access{}, err
		}
	case time.Since(at) > s.opts.DiskFresh:
		select {
		case s.remeasure <- id:
		default: // the sampler is behind; its periodic walk catches up
		}
	}
	a.Free = max(0, int64(sv.DiskMB)<<20-used)
	return a, nil
}

// Wrote tells the server's disk figure that Kiln added (or, negative,
// removed) delta bytes in its root.
func (s *Service) Wrote(id string, delta int64) {
	l := s.liveOf(id)
	l.mu.Lock()
	l.res.DiskBytes = max(0, l.res.DiskBytes+delta)
	l.mu.Unlock()
}

// DiskChanged makes the next write measure the root again (after an
// operation whose effect on the size is not known, such as deleting a
// directory).
func (s *Service) DiskChanged(id string) {
	l := s.liveOf(id)
	l.mu.Lock()
	l.diskAt = time.Time{}
	l.mu.Unlock()
}

// measure walks a server's root and records the figure.
func (s *Service) measure(id string) (int64, error) {
	used, err := DiskUsage(s.node.Root(id))
	if err != nil {
		return 0, err
	}
	l := s.liveOf(id)
	l.mu.Lock()
	l.res.DiskBytes, l.diskAt = used, time.Now()
	l.mu.Unlock()
	return used, nil
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
	used, err := s.measure(id)
	if err != nil {
		return Disk{}, err
	}
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
