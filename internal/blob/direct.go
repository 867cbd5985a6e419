package blob

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is what O_DIRECT asks of a write's buffer address, length
// and file offset: 4096 satisfies disks of 512- and 4096-byte logical
// blocks, which is every disk Kiln is run on that we know of; a device
// asking more refuses the write (EINVAL) and the batch writes through the
// page cache instead.
const directAlign = 4096

// stageDirect writes br, exactly size bytes, to the new staging file tmp
// (relative to the staging directory) with O_DIRECT: the bytes go from
// the caller's buffer to the disk, not through the page cache. ok is false when this store cannot (the file
// system refuses O_DIRECT, or the disk the alignment): the caller then
// stages the blob as before, and the store does so from then on. The
// file is left unsynced (Commit's syncfs flushes the disk's cache and
// the file's size), like a buffered staged blob.
//
// Why (doc.go, "Batches"): a snapshot writes about as many bytes as the
// world holds; through the page cache each byte is copied and each page
// allocated, which on the benchmark's VM cost 1.5–1.8 CPU-s a GB — more
// than hashing, cutting and compressing together — and evicts the game
// servers' own cached files for data nobody reads soon.
func (s *fileStore) stageDirect(tmp string, br *bytes.Reader, size int64) (ok bool, crc uint32, err error) {
	if s.noDirect.Load() {
		return false, 0, nil
	}
	if n := int64(br.Len()); n != size {
		return true, 0, fmt.Errorf("reader holds %d bytes, not the declared %d", n, size)
	}
	sfd := int(s.stage.Fd())
	fd, err := unix.Openat(sfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) {
		s.noDirect.Store(true) // the file system has no O_DIRECT (tmpfs before Linux 6.6, some FUSE)
		return false, 0, nil
	}
	if err != nil {
		return true, 0, err
	}
	w := &directWriter{fd: fd, pool: &s.bounce}
	defer w.release()
	_, err = br.WriteTo(w) // hands w the reader's own bytes, in one Write
	if errors.Is(err, errNoDirect) {
		s.noDirect.Store(true)
		unix.Close(fd)
		unix.Unlinkat(sfd, tmp, 0)
		// WriteTo moved the reader to its end: the caller writes it again.
		if _, err := br.Seek(0, io.SeekStart); err != nil {
			return true, 0, err
		}
		return false, 0, nil
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(sfd, tmp, 0)
		return true, 0, err
	}
	return true, w.crc, nil
}

// errNoDirect: the disk refused an aligned O_DIRECT write (EINVAL).
var errNoDirect = errors.New("O_DIRECT refused")

// directWriter writes to a file opened with O_DIRECT. The bytes up to the
// last whole directAlign block go straight from p when p is aligned (a
// large Go allocation is: the compressed chunks the engine hands over),
// and the last partial block too when p's capacity holds it zero-padded
// (zeroTail); otherwise it, and an unaligned p whole, pass through an
// aligned bounce buffer, zero-padded to a block. The file is cut back to
// its size.
type directWriter struct {
	fd     int
	off    int64
	pool   *sync.Pool // the store's bounce buffers (newBounce)
	bounce *[]byte    // from pool, taken when needed
	crc    uint32     // CRC-32C of the bytes written, hashed as they are handed to the disk
}

func (w *directWriter) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	if w.off%directAlign != 0 {
		// Only the first Write of a blob is direct (bytes.Reader makes one).
		return 0, fmt.Errorf("direct write at unaligned offset %d", w.off)
	}
	w.crc = crc32.Update(w.crc, castagnoli, p)
	start := w.off
	body := n &^ (directAlign - 1)
	if padded := (n + directAlign - 1) &^ (directAlign - 1); padded > body && zeroTail(p, padded) {
		// p's capacity holds its last block's padding, and it is zeros:
		// one write for the whole blob, no bounce (a blocking write less
		// per blob: each costs the runtime a core for a while).
		body = padded
	}
	if body > 0 && aligned(p) {
		if err := w.pwrite(p[:body]); err != nil {
			return 0, err
		}
		p = p[min(body, len(p)):]
	}
	for len(p) > 0 {
		b := w.buffer()
		c := copy(b, p)
		clear(b[c:])
		if err := w.pwrite(b[:(c+directAlign-1)&^(directAlign-1)]); err != nil {
			return 0, err
		}
		p = p[c:]
	}
	if end := start + int64(n); w.off != end {
		// The last block was padded: the file ends at the blob's end.
		if err := unix.Ftruncate(w.fd, end); err != nil {
			return 0, fmt.Errorf("truncate to %d: %w", end, err)
		}
		w.off = end
	}
	return n, nil
}

// pwrite writes b, aligned and a multiple of directAlign long, at w.off.
func (w *directWriter) pwrite(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(w.fd, b, w.off)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EINVAL) && w.off == 0:
			return errNoDirect
		case err != nil:
			return err
		case n == 0:
			return io.ErrShortWrite
		case n%directAlign != 0 && n < len(b):
			// A short write that leaves the rest unaligned: not seen on
			// Linux's block file systems, refused rather than guessed at.
			return io.ErrShortWrite
		}
		w.off += int64(n)
		b = b[n:]
	}
	return nil
}

// bounceSize is the bounce buffer: 64 KiB, so an unaligned blob costs a
// copy and a write every 64 KiB.
const bounceSize = 64 << 10

// newBounce makes an aligned bounce buffer, for the store's pool of them
// (fileStore.bounce): most blobs need one only for their last partial
// block, and a new one per blob was most of the garbage a snapshot made
// after its compressed chunks.
func newBounce() any {
	raw := make([]byte, bounceSize+directAlign)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % directAlign); r != 0 {
		skip = directAlign - r
	}
	b := raw[skip : skip+bounceSize]
	return &b
}

func (w *directWriter) buffer() []byte {
	if w.bounce == nil {
		w.bounce = w.pool.Get().(*[]byte)
	}
	return *w.bounce
}

func (w *directWriter) release() {
	if w.bounce != nil {
		w.pool.Put(w.bounce)
		w.bounce = nil
	}
}

// zeroTail reports whether p is aligned and its capacity holds padded
// bytes, those past its length all zero: then p[:padded] is the blob and
// its padding to a whole block, as the bounce buffer would make it (the
// snapshot engine zeroes its compressed chunks' padding for this). p's
// bytes are only read.
func zeroTail(p []byte, padded int) bool {
	if cap(p) < padded || !aligned(p) {
		return false
	}
	for _, b := range p[len(p):padded] {
		if b != 0 {
			return false
		}
	}
	return true
}

// aligned reports whether p starts on a directAlign boundary.
func aligned(p []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign == 0
}
