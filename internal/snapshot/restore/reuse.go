package restore

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// Reuse (doc.go, "Restore over a tree"): a file of the tree whose content
// is proven equal to the snapshot's entry stays in place instead of being
// staged and swapped. The proof reads the file, never trusts its stat:
// an extent that is a whole chunk is hashed (SHA-256, the chunk's name),
// any other extent (a file in a pack) is compared byte for byte with its
// chunk, fetched and checked as a restore checks every chunk. The stat
// only says which files are worth reading (a regular file, one link, the
// entry's size) and, taken before and after the read and again when the
// swap is planned, that nothing wrote to the file in between.

// keepName is the list of the files kept in place, in the staging
// directory: one line per file in manifest order, which is also the order
// in which plan meets them (both walk directories parents first, names in
// byte order):
//
//	<ino> <size> <mtime> <ctime> <mode> <want mtime> <quoted path>
//
// ino, size, mtime and ctime (ns) are the file's stat before it was read;
// mode (octal) and want mtime are the snapshot's.
const keepName = "keep"

// kept is a file the builder proved equal to its entry.
type kept struct {
	path               string
	ino                uint64
	size, mtime, ctime int64
	mode               uint32 // the snapshot's permission bits
	wantMtime          int64
}

func (k *kept) line() string {
	return fmt.Sprintf("%d %d %d %d %o %d %s\n", k.ino, k.size, k.mtime, k.ctime, k.mode, k.wantMtime, strconv.Quote(k.path))
}

func parseKept(line string) (kept, error) {
	f := strings.SplitN(line, " ", 7)
	if len(f) != 7 {
		return kept{}, errors.New("bad line")
	}
	var k kept
	var errs [6]error
	k.ino, errs[0] = strconv.ParseUint(f[0], 10, 64)
	k.size, errs[1] = strconv.ParseInt(f[1], 10, 64)
	k.mtime, errs[2] = strconv.ParseInt(f[2], 10, 64)
	k.ctime, errs[3] = strconv.ParseInt(f[3], 10, 64)
	mode, err := strconv.ParseUint(f[4], 8, 32)
	errs[4] = err
	k.mode = uint32(mode)
	k.wantMtime, errs[5] = strconv.ParseInt(f[5], 10, 64)
	if err := errors.Join(errs[:]...); err != nil || k.mode&^0o777 != 0 {
		return kept{}, errors.New("bad line")
	}
	p, err := unquote(f[6])
	if err != nil {
		return kept{}, err
	}
	k.path = p
	return k, nil
}

// keepList writes the kept files (the builder's reading goroutine).
type keepList struct {
	f *os.File
	w *bufio.Writer
}

func newKeepList(stageFD int) (*keepList, error) {
	fd, err := unix.Openat(stageFD, keepName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("make the list of kept files: %w", err)
	}
	f := os.NewFile(uintptr(fd), keepName)
	return &keepList{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (l *keepList) add(k *kept) error {
	if _, err := l.w.WriteString(k.line()); err != nil {
		return fmt.Errorf("write the list of kept files: %w", err)
	}
	return nil
}

// close ends the list (it is read back by plan, before the journal
// commits; it need not be durable: a crash before the commit point
// discards the restore).
func (l *keepList) close() error {
	if l.f == nil {
		return nil
	}
	defer func() { l.f = nil }()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the list of kept files: %w", err)
	}
	return nil
}

// keepReader reads the list back in plan, one line ahead.
type keepReader struct {
	sc   *bufio.Scanner
	f    *os.File
	head *kept
	err  error
}

func openKeepList(stageFD int) (*keepReader, error) {
	fd, err := unix.Openat(stageFD, keepName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return &keepReader{}, nil // nothing kept (a test's prepare without the list)
	}
	if err != nil {
		return nil, fmt.Errorf("open the list of kept files: %w", err)
	}
	f := os.NewFile(uintptr(fd), keepName)
	r := &keepReader{f: f, sc: bufio.NewScanner(f)}
	r.sc.Buffer(make([]byte, 64<<10), 64<<10)
	r.advance()
	return r, nil
}

func (r *keepReader) advance() {
	r.head = nil
	if r.sc == nil || r.err != nil {
		return
	}
	if !r.sc.Scan() {
		r.err = r.sc.Err()
		return
	}
	k, err := parseKept(r.sc.Text())
	if err != nil {
		r.err = fmt.Errorf("the list of kept files: %w", err)
		return
	}
	r.head = &k
}

// next returns the kept file at rel if it is the next one of the list
// (and moves past it), else nil.
func (r *keepReader) next(rel string) *kept {
	if r.head == nil || r.head.path != rel {
		return nil
	}
	k := r.head
	r.advance()
	return k
}

// done reports an error if the list was not read to its end: a kept file
// plan did not meet (its directory changed since it was checked).
func (r *keepReader) done() error {
	if r.err != nil {
		return r.err
	}
	if r.head != nil {
		return fmt.Errorf("%s was checked in place but is no longer where it was: the tree changed during the restore", files.Display(r.head.path))
	}
	return nil
}

func (r *keepReader) close() {
	if r.f != nil {
		r.f.Close()
	}
}

// sameStat reports whether st is still the stat k was taken from.
func (k *kept) sameStat(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && st.Ino == k.ino && st.Size == k.size &&
		unix.TimespecToNsec(st.Mtim) == k.mtime && unix.TimespecToNsec(st.Ctim) == k.ctime
}

// maxPackCache is how many checked chunks (packs) the proof keeps: the
// files of a pack follow each other in the manifest, and a file reused
// from a parent's pack may sit between them.
const maxPackCache = 4

// prover proves files of the tree equal to their entries. It belongs to
// the builder's reading goroutine; the hashes of one file's extents run
// on up to workers goroutines.
type prover struct {
	b       *builder
	workers int
	dec     *zstd.Decoder
	comp    []byte
	packs   []cachedChunk // most recent last
	bufs    sync.Pool
}

type cachedChunk struct {
	sum  [32]byte
	data []byte
}

func newProver(b *builder, workers int) *prover {
	return &prover{b: b, workers: workers, bufs: sync.Pool{New: func() any { s := make([]byte, 256<<10); return &s }}}
}

func (p *prover) close() {
	if p.dec != nil {
		p.dec.Close()
	}
}

// prove returns the file name of live directory dir as kept when it is a
// regular file with one link whose content is en's; nil when it is not
// (or cannot be read: it is then restored). Errors are the store's and
// ctx's, from fetching a pack to compare with.
func (p *prover) prove(ctx context.Context, dir int, name string, en *manifest.Entry) (*kept, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size != en.Size {
		return nil, nil
	}
	fd, err := openRead(dir, name)
	if err != nil {
		return nil, nil
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil
	}
	k := &kept{path: en.Path, ino: st.Ino, size: st.Size, mtime: unix.TimespecToNsec(st.Mtim),
		ctime: unix.TimespecToNsec(st.Ctim), mode: uint32(en.Mode.Perm()), wantMtime: en.Mtime}
	if !k.sameStat(&st) || st.Size != en.Size {
		return nil, nil
	}
	same, err := p.compare(ctx, fd, en)
	if err != nil || !same {
		return nil, err
	}
	// Nothing wrote to it while it was read.
	if err := unix.Fstat(fd, &st); err != nil || !k.sameStat(&st) {
		return nil, nil
	}
	return k, nil
}

// openRead opens a regular file to read it, never through a symlink,
// without blocking (a FIFO put there meanwhile) and, where the owner
// may, without updating its atime.
func openRead(dir int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	for {
		fd, err := unix.Openat(dir, name, flags|unix.O_NOATIME, 0)
		if errors.Is(err, unix.EPERM) {
			fd, err = unix.Openat(dir, name, flags, 0)
		}
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// compare reports whether file fd holds exactly en's extents: a whole
// chunk by its SHA-256, a slice of one against the chunk's bytes.
func (p *prover) compare(ctx context.Context, fd int, en *manifest.Entry) (bool, error) {
	var at int64
	type whole struct {
		ref manifest.ChunkRef
		at  int64
	}
	var wholes []whole
	for _, x := range en.Extents {
		if x.Off == 0 && x.Len == x.Chunk.Len {
			wholes = append(wholes, whole{x.Chunk, at})
		} else {
			data, err := p.chunk(ctx, x.Chunk)
			if err != nil {
				return false, err
			}
			if same, err := p.equal(fd, data[x.Off:x.Off+x.Len], at); err != nil || !same {
				return false, nil
			}
		}
		at += x.Len
	}
	if len(wholes) == 0 {
		return true, nil
	}
	if len(wholes) == 1 { // most files: no goroutine
		sum, err := p.hash(fd, wholes[0].at, wholes[0].ref.Len)
		return err == nil && sum == wholes[0].ref.Sum, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.workers)
	var differs atomic.Bool
	for _, w := range wholes {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			// A read error is a difference too: the file is restored.
			if sum, err := p.hash(fd, w.at, w.ref.Len); err != nil || sum != w.ref.Sum {
				differs.Store(true)
				return errDiffers // stops the others
			}
			return nil
		})
	}
	err := g.Wait()
	if differs.Load() {
		return false, ctx.Err()
	}
	return err == nil, err
}

// errDiffers stops the hashes of a file once one extent differs.
var errDiffers = errors.New("differs")

// hash returns the SHA-256 of n bytes of fd from off.
func (p *prover) hash(fd int, off, n int64) ([32]byte, error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	h := sha256.New()
	for n > 0 {
		m, err := unix.Pread(fd, buf[:min(int64(len(buf)), n)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return [32]byte{}, err
		}
		if m == 0 {
			return [32]byte{}, io.ErrUnexpectedEOF
		}
		h.Write(buf[:m])
		off, n = off+int64(m), n-int64(m)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// equal reports whether fd holds want at off.
func (p *prover) equal(fd int, want []byte, off int64) (bool, error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	for len(want) > 0 {
		m, err := unix.Pread(fd, buf[:min(len(buf), len(want))], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if m == 0 || string(buf[:m]) != string(want[:m]) {
			return false, nil
		}
		want, off = want[m:], off+int64(m)
	}
	return true, nil
}

// chunk returns chunk ref's bytes, checked, from the cache or the store.
func (p *prover) chunk(ctx context.Context, ref manifest.ChunkRef) ([]byte, error) {
	for _, c := range p.packs {
		if c.sum == ref.Sum {
			return c.data, nil
		}
	}
	if p.dec == nil {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*engine.MaxChunk))
		if err != nil {
			return nil, fmt.Errorf("chunk decoder: %w", err)
		}
		p.dec = dec
	}
	var reuse []byte
	if len(p.packs) == maxPackCache {
		reuse = p.packs[0].data
		p.packs = append(p.packs[:0], p.packs[1:]...)
	}
	data, err := p.b.fetch(ctx, p.dec, ref, &p.comp, reuse)
	if err != nil {
		return nil, err
	}
	p.packs = append(p.packs, cachedChunk{sum: ref.Sum, data: data})
	return data, nil
}

// liveDirs follows the manifest's walk order in the tree, one directory
// open per level (O_NOFOLLOW, -1 where the tree has no directory there),
// to look at the file of the tree at an entry's path: the first pass's
// estimate of what the staged tree needs.
type liveDirs struct {
	stack []stagedDir // path and live only; [0] is the root, not closed
}

func newLiveDirs(rootFD int) *liveDirs {
	return &liveDirs{stack: []stagedDir{{path: ".", live: rootFD}}}
}

// parent pops to the directory of rel (listed before it: the manifest
// was checked up to rel) and returns its descriptor, -1 if none.
func (l *liveDirs) parent(rel string) int {
	dir := path.Dir(rel)
	for len(l.stack) > 1 && l.stack[len(l.stack)-1].path != dir {
		if fd := l.stack[len(l.stack)-1].live; fd >= 0 {
			unix.Close(fd)
		}
		l.stack = l.stack[:len(l.stack)-1]
	}
	if l.stack[len(l.stack)-1].path != dir {
		return -1
	}
	return l.stack[len(l.stack)-1].live
}

// enter opens the tree's directory rel, if it is one.
func (l *liveDirs) enter(rel string) {
	fd := l.parent(rel)
	if fd >= 0 {
		if sub, err := openDirAt(fd, path.Base(rel)); err == nil {
			fd = sub
		} else {
			fd = -1
		}
	}
	l.stack = append(l.stack, stagedDir{path: rel, live: fd})
}

// maySkip reports whether the tree holds, at en's path, a regular file
// with one link of en's size: one the second pass may keep in place.
func (l *liveDirs) maySkip(en *manifest.Entry) bool {
	fd := l.parent(en.Path)
	if fd < 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(fd, path.Base(en.Path), &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && st.Size == en.Size
}

func (l *liveDirs) close() {
	for _, d := range l.stack[1:] {
		if d.live >= 0 {
			unix.Close(d.live)
		}
	}
	l.stack = l.stack[:1]
}
