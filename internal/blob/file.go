package blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// stageDir holds the file backend's writes in flight. '~' is not a key
// byte, so no key ever names it or anything in it (see doc.go).
const stageDir = "~tmp"

// fileStore is the file backend: one file per blob under a directory, the
// key its path relative to it. Every access goes through an os.Root.
type fileStore struct {
	dir   string   // absolute, for String
	root  *os.Root // dir
	stage *os.File // dir/~tmp, held open for renameat2 and linkat

	// noDirect: this store's file system or disk refused O_DIRECT once;
	// batches stage through the page cache (direct.go).
	noDirect atomic.Bool
	bounce   sync.Pool // aligned bounce buffers of direct writes (newBounce)
}

func openFile(ctx context.Context, u *url.URL, opts Options) (*fileStore, error) {
	if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || !path.IsAbs(u.Path) {
		return nil, fmt.Errorf("open blob store: a file URL names an absolute directory: file:///abs/dir")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("open blob store: a file URL has no user, query or fragment: file:///abs/dir")
	}
	dir := filepath.Clean(u.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	s := &fileStore{dir: dir, root: root, bounce: sync.Pool{New: newBounce}}
	if err := root.Mkdir(stageDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		root.Close()
		return nil, fmt.Errorf("open blob store %s: %w", s, err)
	}
	if s.stage, err = root.Open(stageDir); err != nil {
		root.Close()
		return nil, fmt.Errorf("open blob store %s: %w", s, err)
	}
	if err := s.clean(ctx, opts); err != nil {
		s.stage.Close()
		root.Close()
		return nil, fmt.Errorf("open blob store %s: %w", s, err)
	}
	return s, nil
}

// clean removes the staged files modified before opts.CleanBefore: writes
// in flight of an earlier process, left by a crash.
func (s *fileStore) clean(ctx context.Context, opts Options) error {
	if opts.CleanBefore.IsZero() {
		return nil
	}
	entries, err := s.root.FS().(fs.ReadDirFS).ReadDir(stageDir)
	if err != nil {
		return fmt.Errorf("clean %s: %w", stageDir, err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("clean %s: %w", stageDir, err)
		}
		if fi.ModTime().Before(opts.CleanBefore) {
			if err := s.root.RemoveAll(stageDir + "/" + e.Name()); err != nil {
				return fmt.Errorf("clean %s: %w", stageDir, err)
			}
		}
	}
	return nil
}

func (s *fileStore) String() string {
	return (&url.URL{Scheme: "file", Path: s.dir}).String()
}

// Put writes r into a new file in the staging directory, hashing the
// bytes as it writes them (CRC-32C: a Checked body whose bytes differ
// from its checksum fails here, ErrChecksum), syncs it and renames it to
// key with RENAME_NOREPLACE (or links it, where the file system lacks
// that flag), so the blob appears whole or not at all and an existing
// one is never replaced; then it syncs key's directory.
func (s *fileStore) Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error) {
	r, want, check := unwrapChecked(r)
	if err := checkFileKey(key); err != nil {
		return false, fmt.Errorf("put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	// Most Puts of an existing blob (a chunk another snapshot stored)
	// stop here without reading r.
	switch _, err := s.Stat(ctx, key); {
	case err == nil:
		return false, nil
	case !errors.Is(err, ErrNotFound):
		return false, fmt.Errorf("put %s: %w", key, err)
	}

	tmp := "put-" + rand.Text()
	f, err := s.root.OpenFile(stageDir+"/"+tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	staged := true
	defer func() {
		if staged {
			unix.Unlinkat(int(s.stage.Fd()), tmp, 0)
		}
	}()
	w := &crcWriter{w: f}
	err = writeExact(ctx, w, r, size)
	if err == nil && check {
		err = checkWritten(w.crc, want)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}

	dir, name := splitKey(key)
	d, err := s.mkdirs(dir, true)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	defer d.Close()
	created, err = s.publish(tmp, d, name)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	staged = !created
	if !created {
		return false, nil
	}
	if err := d.Sync(); err != nil {
		return true, fmt.Errorf("put %s: sync directory: %w", key, err)
	}
	return true, nil
}

// publish moves the staged file tmp to name in d unless name exists there.
func (s *fileStore) publish(tmp string, d *os.File, name string) (created bool, err error) {
	sfd, dfd := int(s.stage.Fd()), int(d.Fd())
	err = unix.Renameat2(sfd, tmp, dfd, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		// No RENAME_NOREPLACE on this file system (ZFS before 2.2, some
		// FUSE): link(2) never replaces either.
		err = unix.Linkat(sfd, tmp, dfd, name, 0)
		if err == nil {
			unix.Unlinkat(sfd, tmp, 0)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if serr := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return false, fmt.Errorf("a directory of other keys has this name")
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rename into place: %w", err)
	}
	return true, nil
}

// writeExact writes the size bytes of r (everything for size -1) to w (a
// file's crcWriter), failing when r holds fewer or more. A *bytes.Reader
// of the right length (what the snapshot engine hands over: a compressed
// chunk) is written with one Write, with nothing written when its length
// is wrong; any other reader is copied through a 1 MiB buffer (io.Copy
// would take 32 KiB at a time, since sizeReader hides a WriterTo; w hides
// *os.File's ReadFrom, which would too).
func writeExact(ctx context.Context, w *crcWriter, r io.Reader, size int64) error {
	if br, ok := r.(*bytes.Reader); ok && size >= 0 {
		if n := int64(br.Len()); n != size {
			return fmt.Errorf("reader holds %d bytes, not the declared %d", n, size)
		}
		_, err := br.WriteTo(w)
		return err
	}
	bufSize := int64(1 << 20)
	if size >= 0 && size < bufSize {
		bufSize = size + 1 // room to see an excess
	}
	_, err := io.CopyBuffer(w, &sizeReader{ctx: ctx, r: r, size: size}, make([]byte, bufSize))
	return err
}

// checkWritten compares the CRC-32C of what a Put wrote with the one its
// caller gave (Checked).
func checkWritten(wrote, want uint32) error {
	if wrote != want {
		return fmt.Errorf("%w: the bytes written have CRC-32C %08x, the caller's is %08x", ErrChecksum, wrote, want)
	}
	return nil
}

// mkdirs opens the directory dir ("." for the top), creating what is
// missing and, with sync, syncing the parent of each directory it creates.
func (s *fileStore) mkdirs(dir string, sync bool) (*os.File, error) {
	d, err := s.root.Open(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	for i := 1; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		err := s.root.Mkdir(dir[:i], 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !sync {
			continue
		}
		parent, _ := splitKey(dir[:i])
		if err := s.syncDir(parent); err != nil {
			return nil, err
		}
	}
	return s.root.Open(dir)
}

func (s *fileStore) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// nameMax is the longest file name Linux file systems take (NAME_MAX).
const nameMax = 255

// checkFileKey is ValidateKey, and each segment a file name this backend
// can create.
func checkFileKey(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > nameMax {
			return fmt.Errorf("%w %q: a segment longer than the %d bytes of a file name", ErrInvalidKey, key, nameMax)
		}
	}
	return nil
}

// splitKey splits key into its directory ("." for the top) and its name.
func splitKey(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return ".", key
	}
	return key[:i], key[i+1:]
}

// notFound tells the errors that mean no blob is there: nothing at the
// path, or a file where a directory of the path should be.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Get opens key's file. A directory (of other keys) is not a blob.
func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkFileKey(key); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := s.root.Open(key)
	if notFound(err) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return f, nil
}

// Stat describes key's file. A directory (of other keys) is not a blob.
func (s *fileStore) Stat(ctx context.Context, key string) (Info, error) {
	if err := checkFileKey(key); err != nil {
		return Info{}, fmt.Errorf("stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := s.root.Lstat(key)
	if notFound(err) {
		return Info{}, fmt.Errorf("stat %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, fmt.Errorf("stat %s: %w", key, ErrNotFound)
	}
	return Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete unlinks key's file and syncs its directory, so that a deletion
// the caller saw succeed survives a crash (the snapshot collector deletes
// a manifest before the chunks only it referenced). Directories stay: a
// Put racing a Delete never finds its directory gone.
func (s *fileStore) Delete(ctx context.Context, key string) error {
	if err := checkFileKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	dir, name := splitKey(key)
	d, err := s.root.Open(dir)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	defer d.Close()
	switch err := unix.Unlinkat(int(d.Fd()), name, 0); {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return nil // nothing there, or a directory of other keys: no blob
	case err != nil:
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("delete %s: sync directory: %w", key, err)
	}
	return nil
}

// List walks only the directory that prefix's directory part names, and
// within it only the subdirectories that can hold a key with prefix.
func (s *fileStore) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	start, _ := splitKey(prefix)
	if !strings.Contains(prefix, "/") {
		start = "."
	}
	var fnErr error
	errStop := errors.New("stop")
	err := fs.WalkDir(s.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if notFound(err) {
				return nil // gone meanwhile, or prefix names no directory
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			// A directory name that is no key segment (the staging
			// directory) holds no blob; nor does one whose keys cannot
			// start with prefix.
			if checkKey(p) != "" || !(strings.HasPrefix(p+"/", prefix) || strings.HasPrefix(prefix, p+"/")) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(p, prefix) || checkKey(p) != "" {
			return nil
		}
		fi, err := d.Info()
		if notFound(err) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if err := fn(Info{Key: p, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			fnErr = err
			return errStop
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	return nil
}
