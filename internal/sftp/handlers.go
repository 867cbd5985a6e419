package sftp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/validate"
)

// fsys answers one session's SFTP requests on its server's root, held
// open for the session: every path goes through files (cleaned, resolved
// inside the root by descriptor), never by a host path. It implements
// pkg/sftp's request-server handlers.
type fsys struct {
	ctx        context.Context // the session's: ends with it
	se         *session
	root       *files.Root
	servers    Servers
	maxHandles int
	log        *slog.Logger
}

// Interfaces of pkg/sftp the handlers implement (checked here, since the
// request server finds the optional ones by type assertion).
var (
	_ sftp.FileReader           = (*fsys)(nil)
	_ sftp.OpenFileWriter       = (*fsys)(nil)
	_ sftp.PosixRenameFileCmder = (*fsys)(nil)
	_ sftp.StatVFSFileCmder     = (*fsys)(nil)
	_ sftp.LstatFileLister      = (*fsys)(nil)
	_ sftp.RealPathFileLister   = (*fsys)(nil)
	_ sftp.ReadlinkFileLister   = (*fsys)(nil)
)

// rel turns a request's path (pkg/sftp has made it absolute and resolved
// ".." lexically, so "/../x" is "/x": the session's "/" is the server's
// root) into a root-relative path.
func rel(p string) (string, error) { return files.Clean("path", p) }

// disk is the server's ledger, asked for each writing operation (it also
// picks up a changed disk_mb).
func (f *fsys) disk() (*quota.Account, error) {
	a, err := f.servers.Access(f.ctx, f.se.cred.teamID, f.se.cred.serverID, true)
	if err != nil {
		return nil, err
	}
	return a.Disk, nil
}

// writing runs op with a reservation of the server's ledger, on the
// session's root (files.WritingOn).
func (f *fsys) writing(op func(r *files.Root, res *quota.Reservation) error) error {
	d, err := f.disk()
	if err != nil {
		return err
	}
	return files.WritingOn(f.root, d, op)
}

// takeHandle counts an open handle against the session's limit; the
// returned func gives it back (once).
func (f *fsys) takeHandle() (func(), error) {
	if int(f.se.handles.Add(1)) > f.maxHandles {
		f.se.handles.Add(-1)
		return nil, fmt.Errorf("%w: too many open files in this session (at most %d)", sftp.ErrSSHFxFailure, f.maxHandles)
	}
	var once sync.Once
	return func() { once.Do(func() { f.se.handles.Add(-1) }) }, nil
}

// Fileread opens a regular file for reading (files.Root.OpenRead: links
// inside followed, devices, FIFOs and hard-linked files refused).
func (f *fsys) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	p, err := rel(r.Filepath)
	if err != nil {
		return nil, f.status(err)
	}
	release, err := f.takeHandle()
	if err != nil {
		return nil, err
	}
	file, _, err := f.root.OpenRead(p)
	if err != nil {
		release()
		return nil, f.status(err)
	}
	return &readHandle{File: file, release: release}, nil
}

type readHandle struct {
	*os.File
	release func()
}

func (h *readHandle) Close() error {
	defer h.release()
	return h.File.Close()
}

// Filewrite opens a file for writing at offsets (uploads).
func (f *fsys) Filewrite(r *sftp.Request) (io.WriterAt, error) { return f.openWrite(r, false) }

// OpenFile opens a file for reading and writing.
func (f *fsys) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) { return f.openWrite(r, true) }

func (f *fsys) openWrite(r *sftp.Request, read bool) (*writeHandle, error) {
	p, err := rel(r.Filepath)
	if err != nil {
		return nil, f.status(err)
	}
	pf := r.Pflags()
	// A new file is 0644: pkg/sftp drops the attribute flags of an open
	// (and mkdir) packet, so the mode a client sends there cannot be read
	// reliably; clients that keep modes (put -p) set them afterwards.
	fl := files.WriteFlags{Read: read, Create: pf.Creat, Exclusive: pf.Excl, Truncate: pf.Trunc}
	release, err := f.takeHandle()
	if err != nil {
		return nil, err
	}
	d, err := f.disk()
	if err != nil {
		release()
		return nil, f.status(err)
	}
	h, err := f.root.OpenWrite(p, fl, d)
	if err != nil {
		release()
		return nil, f.status(err)
	}
	return &writeHandle{h: h, f: f, release: release}, nil
}

// writeHandle maps a files.WriteHandle's errors to SFTP statuses: a write
// past the disk limit fails there with a "no space" failure.
type writeHandle struct {
	h       *files.WriteHandle
	f       *fsys
	release func()
}

func (w *writeHandle) WriteAt(p []byte, off int64) (int, error) {
	n, err := w.h.WriteAt(p, off)
	if err != nil {
		return n, w.f.status(err)
	}
	return n, nil
}

func (w *writeHandle) ReadAt(p []byte, off int64) (int, error) { return w.h.ReadAt(p, off) }

func (w *writeHandle) Close() error {
	defer w.release()
	if err := w.h.Close(); err != nil {
		return w.f.status(err)
	}
	return nil
}

// Filecmd runs the commands that change the tree.
func (f *fsys) Filecmd(r *sftp.Request) error {
	p, err := rel(r.Filepath)
	if r.Method == "Rmdir" || r.Method == "Remove" {
		// A look-alike of Kiln's names that Kiln did not make may be
		// removed by its owner (files.CleanRemovable).
		p, err = files.CleanRemovable("path", r.Filepath)
	}
	if err != nil && r.Method != "Symlink" {
		return f.status(err)
	}
	switch r.Method {
	case "Setstat":
		return f.setstat(r, p)
	case "Rename":
		to, err := rel(r.Target)
		if err != nil {
			return f.status(err)
		}
		if err := f.parentExists(to); err != nil {
			return err
		}
		// SFTP's rename never replaces (files.Root.Rename: RENAME_NOREPLACE).
		// It changes no usage, but goes through the ledger like every
		// write: a restore's hold refuses it.
		return f.status(f.writing(func(r *files.Root, _ *quota.Reservation) error { return r.Rename(p, to) }))
	case "Rmdir":
		return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error { return r.RemoveDir(p, res) }))
	case "Remove":
		return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error { return r.RemoveFile(p, res) }))
	case "Mkdir":
		return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error { return r.MkdirOne(p, 0o755, res) }))
	case "Symlink":
		return f.symlink(r.Filepath, r.Target)
	case "Link":
		return f.status(files.ErrHardLink)
	}
	return sftp.ErrSSHFxOpUnsupported
}

// PosixRename is rename(2): an existing file at the target is replaced
// atomically (posix-rename@openssh.com, what OpenSSH's rename uses).
func (f *fsys) PosixRename(r *sftp.Request) error {
	from, err := rel(r.Filepath)
	if err != nil {
		return f.status(err)
	}
	to, err := rel(r.Target)
	if err != nil {
		return f.status(err)
	}
	return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error { return r.RenameReplace(from, to, res) }))
}

// StatVFS answers with the server's disk limit as the file system's size
// and what is left under it as free space (df in an SFTP client shows
// the limit, not the host's disk).
func (f *fsys) StatVFS(r *sftp.Request) (*sftp.StatVFS, error) {
	d, err := f.disk()
	if err != nil {
		return nil, f.status(err)
	}
	fig := d.Figures()
	const bs = quota.BlockSize
	free := uint64(fig.Free()) / bs
	return &sftp.StatVFS{
		Bsize: bs, Frsize: bs,
		Blocks: uint64(fig.Limit) / bs, Bfree: free, Bavail: free,
		Files: 1 << 20, Ffree: 1 << 20, Favail: 1 << 20,
		Namemax: files.MaxNameLen,
	}, nil
}

// parentExists refuses a target whose directory is missing (SFTP creates
// no parents).
func (f *fsys) parentExists(p string) error {
	e, err := f.root.StatFollow(path.Dir(p))
	if err != nil {
		return f.status(err)
	}
	if !e.IsDir() {
		return f.status(files.ErrNotDirectory)
	}
	return nil
}

// setstat changes a size, a mode and times, in one pass through the
// ledger (a restore's hold refuses all of it). Ownership (UidGid) is
// ignored: files keep Kiln's owner, and a client preserving ownership
// must not fail its upload.
func (f *fsys) setstat(r *sftp.Request, p string) error {
	fl := r.AttrFlags()
	a := r.Attributes()
	mode := a.Mode & 0o7777
	if fl.Permissions {
		if mode&0o7000 != 0 {
			return fmt.Errorf("%w: setuid, setgid and sticky bits are not allowed", sftp.ErrSSHFxPermissionDenied)
		}
		if p == "." {
			return fmt.Errorf("%w: the server's root directory keeps its mode", sftp.ErrSSHFxPermissionDenied)
		}
	}
	if !fl.Size && !fl.Permissions && !fl.Acmodtime {
		return nil
	}
	return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error {
		if fl.Size {
			if err := r.Truncate(p, int64(a.Size), res); err != nil {
				return err
			}
		}
		if fl.Permissions {
			if err := r.Chmod(p, fs.FileMode(mode)); err != nil {
				return err
			}
		}
		if fl.Acmodtime {
			return r.Chtimes(p, time.Unix(int64(a.Atime), 0), time.Unix(int64(a.Mtime), 0))
		}
		return nil
	}))
}

// symlink creates linkpath -> target. An absolute target names a place
// in the session's view, whose "/" is the server's root: it is stored
// relative to the link's directory, so the link means the same to the
// game server. files.Root.Symlink refuses a target leading outside.
func (f *fsys) symlink(target, linkpath string) error {
	lp, err := rel(linkpath)
	if err != nil {
		return f.status(err)
	}
	if strings.HasPrefix(target, "/") {
		t, err := rel(path.Clean(target))
		if err != nil {
			return f.status(err)
		}
		target = relativeTo(path.Dir(lp), t)
	}
	if err := f.parentExists(lp); err != nil {
		return err
	}
	return f.status(f.writing(func(r *files.Root, res *quota.Reservation) error {
		if err := res.Grow(quota.EntryCost); err != nil {
			return files.ErrQuota
		}
		if err := r.Symlink(target, lp); err != nil {
			return err
		}
		res.Changed(quota.EntryCost)
		return nil
	}))
}

// relativeTo is root-relative path t as seen from root-relative
// directory dir ("." for the root).
func relativeTo(dir, t string) string {
	var from, to []string
	if dir != "." {
		from = strings.Split(dir, "/")
	}
	if t != "." {
		to = strings.Split(t, "/")
	}
	i := 0
	for i < len(from) && i < len(to) && from[i] == to[i] {
		i++
	}
	parts := make([]string, 0, len(from)-i+len(to)-i)
	for range from[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, to[i:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// Filelist answers List (a directory, paged), Stat (through links) and
// Lstat (pkg/sftp calls Lstat for SSH_FXP_LSTAT).
func (f *fsys) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	p, err := rel(r.Filepath)
	if err != nil {
		return nil, f.status(err)
	}
	switch r.Method {
	case "List":
		e, err := f.root.StatFollow(p)
		if err != nil {
			return nil, f.status(err)
		}
		if !e.IsDir() {
			return nil, f.status(files.ErrNotDirectory)
		}
		release, err := f.takeHandle()
		if err != nil {
			return nil, err
		}
		return &lister{f: f, dir: p, release: release}, nil
	case "Stat":
		e, err := f.root.StatFollow(p)
		if err != nil {
			return nil, f.status(err)
		}
		return one{info(e)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat describes an entry itself (a link as a link).
func (f *fsys) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	p, err := rel(r.Filepath)
	if err != nil {
		return nil, f.status(err)
	}
	e, err := f.root.Stat(p)
	if err != nil {
		return nil, f.status(err)
	}
	return one{info(e)}, nil
}

// Readlink returns a link's target as stored.
func (f *fsys) Readlink(p string) (string, error) {
	r, err := rel(p)
	if err != nil {
		return "", f.status(err)
	}
	t, err := f.root.Readlink(r)
	if err != nil {
		return "", f.status(err)
	}
	return t, nil
}

// RealPath makes p absolute in the session's view (lexically: ".."
// stops at the server's root).
func (f *fsys) RealPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	r, err := rel(path.Clean(p))
	if err != nil {
		return "", f.status(err)
	}
	return files.Display(r), nil
}

// lister pages through a directory with files.Root.ListPage (memory
// bounded by the page, whatever the directory holds).
type lister struct {
	f       *fsys
	dir     string
	next    files.Cursor
	offset  int64
	done    bool
	release func()
}

func (l *lister) ListAt(buf []os.FileInfo, offset int64) (int, error) {
	if offset != l.offset {
		// pkg/sftp asks in order; anything else starts over.
		l.next, l.offset, l.done = files.Cursor{}, 0, false
		for l.offset < offset && !l.done {
			page, err := l.f.root.ListPage(l.dir, l.next, int(min(int64(files.MaxListLimit), offset-l.offset)))
			if err != nil {
				return 0, l.f.status(err)
			}
			l.offset += int64(len(page.Entries))
			l.next, l.done = page.Next, page.Next.IsZero()
		}
	}
	if l.done || len(buf) == 0 {
		return 0, io.EOF
	}
	page, err := l.f.root.ListPage(l.dir, l.next, min(len(buf), files.MaxListLimit))
	if err != nil {
		return 0, l.f.status(err)
	}
	n := 0
	for _, e := range page.Entries {
		buf[n] = info(e)
		n++
	}
	l.offset += int64(n)
	l.next, l.done = page.Next, page.Next.IsZero()
	if l.done {
		return n, io.EOF
	}
	return n, nil
}

func (l *lister) Close() error { l.release(); return nil }

// one is a listing of one entry (Stat, Lstat).
type one []os.FileInfo

func (o one) ListAt(buf []os.FileInfo, offset int64) (int, error) {
	if offset >= int64(len(o)) {
		return 0, io.EOF
	}
	n := copy(buf, o[offset:])
	if n < len(o)-int(offset) {
		return n, nil
	}
	return n, io.EOF
}

// fileInfo is a files.Entry as os.FileInfo.
type fileInfo struct{ e files.Entry }

func info(e files.Entry) os.FileInfo  { return fileInfo{e} }
func (i fileInfo) Name() string       { return i.e.Name }
func (i fileInfo) Size() int64        { return i.e.Size }
func (i fileInfo) Mode() fs.FileMode  { return i.e.Mode }
func (i fileInfo) ModTime() time.Time { return i.e.ModTime }
func (i fileInfo) IsDir() bool        { return i.e.IsDir() }
func (i fileInfo) Sys() any           { return nil }
func (i fileInfo) String() string     { return fs.FormatFileInfo(i) }

// status turns an error of files (or servers, quota) into what the SFTP
// client is told: a status code and a message that names nothing of the
// host. Unknown errors are logged here, once, and answered "failure".
func (f *fsys) status(err error) error {
	if err == nil {
		return nil
	}
	var ve *validate.Error
	switch {
	case errors.Is(err, files.ErrNotFound), errors.Is(err, serverroot.ErrNotFound):
		return os.ErrNotExist
	case errors.Is(err, files.ErrQuota), errors.Is(err, quota.ErrQuota):
		return f.overLimit()
	case quota.IsDiskFull(err):
		return noSpace("the host's disk is full")
	case errors.Is(err, files.ErrExists):
		return fmt.Errorf("%w: the destination already exists", sftp.ErrSSHFxFailure)
	case errors.Is(err, files.ErrNotDirectory):
		return fmt.Errorf("%w: not a directory", sftp.ErrSSHFxFailure)
	case errors.Is(err, files.ErrNotFile):
		return fmt.Errorf("%w: not a regular file", sftp.ErrSSHFxFailure)
	case errors.Is(err, files.ErrSymlink):
		return fmt.Errorf("%w: is a symbolic link (not acted through)", sftp.ErrSSHFxPermissionDenied)
	case errors.Is(err, files.ErrHardLink):
		return fmt.Errorf("%w: hard links are not supported", sftp.ErrSSHFxPermissionDenied)
	case errors.Is(err, serverroot.ErrInstalling):
		return fmt.Errorf("%w: the server is being installed; try again when it is done", sftp.ErrSSHFxFailure)
	case errors.Is(err, serverroot.ErrRestoring), errors.Is(err, quota.ErrHeld):
		return fmt.Errorf("%w: a snapshot is being restored into the server; try again when it is done", sftp.ErrSSHFxFailure)
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: directory not empty", sftp.ErrSSHFxFailure)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return sftp.ErrSSHFxPermissionDenied
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: invalid argument", sftp.ErrSSHFxFailure)
	case errors.As(err, &ve):
		return fmt.Errorf("%w: %s", sftp.ErrSSHFxFailure, ve.Error())
	}
	if isStatus(err) {
		return err
	}
	f.log.ErrorContext(f.ctx, "sftp operation failed", "err", err)
	return sftp.ErrSSHFxFailure
}

// overLimit is the answer to a write past the server's disk limit: the
// message names the limit (what the files API's 507 says, with the
// figure), since the code alone reads "Failure".
func (f *fsys) overLimit() error {
	limit := ""
	if d, err := f.disk(); err == nil {
		if l := d.Figures().Limit; l > 0 {
			limit = fmt.Sprintf(" (%d MiB)", l>>20)
		}
	}
	return noSpace("the server's disk limit" + limit + " would be exceeded; this request wrote nothing")
}

// noSpace is the answer to a write past the limit. SFTP version 3 (what
// pkg/sftp and OpenSSH speak) has no "no space" code (SSH_FX_NO_SPACE_ON_
// FILESYSTEM is version 5's 14, which OpenSSH's client prints as
// "Unknown status"): SSH_FX_FAILURE with a message, as OpenSSH's own
// server answers ENOSPC. OpenSSH's client prints only the code; others
// (pkg/sftp, WinSCP, FileZilla) show the message.
func noSpace(why string) error {
	return &statusError{code: sftp.ErrSSHFxFailure, msg: "no space left: " + why}
}

// statusError is an SFTP status with a message of its own: pkg/sftp
// sends err.Error() as the status message (a wrapped code would read
// "failure: …") and finds the code by errors.As through Unwrap.
type statusError struct {
	code error // one of sftp.ErrSSHFx…
	msg  string
}

func (e *statusError) Error() string { return e.msg }
func (e *statusError) Unwrap() error { return e.code }

// isStatus reports whether err already carries an SFTP status code.
func isStatus(err error) bool {
	for _, code := range []error{sftp.ErrSSHFxFailure, sftp.ErrSSHFxPermissionDenied, sftp.ErrSSHFxOpUnsupported,
		sftp.ErrSSHFxNoSuchFile, sftp.ErrSSHFxEOF, sftp.ErrSSHFxBadMessage} {
		if errors.Is(err, code) {
			return true
		}
	}
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, io.EOF)
}
