package files

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/validate"
)

// List bounds (api.md §4).
const (
	// MaxListLimit is the most entries one page of a listing holds, and
	// the default page size.
	MaxListLimit = 10000
)

// listKey is an entry's place in a listing: directories first, then by
// name in byte order.
type listKey struct {
	notDir bool
	name   string
}

func compareKeys(a, b listKey) int {
	if a.notDir != b.notDir {
		if a.notDir {
			return 1
		}
		return -1
	}
	return strings.Compare(a.name, b.name)
}

// Cursor is where a page of a listing ends: the next page holds the
// entries that come after it. The zero Cursor is the start of a listing
// (as an argument) or the end (as a Page's Next).
type Cursor struct {
	key listKey
	set bool
}

// IsZero reports whether c is the zero Cursor.
func (c Cursor) IsZero() bool { return !c.set }

// cursorVersion begins every encoded cursor, so the format can change
// without a client's old cursor being misread.
const cursorVersion = 1

// String encodes c for a client: opaque, URL-safe base64 of a version
// byte, a kind byte ('d' directory, 'f' anything else) and the name's
// bytes; "" for the zero Cursor.
func (c Cursor) String() string {
	if !c.set {
		return ""
	}
	b := make([]byte, 0, 2+len(c.key.name))
	kind := byte('d')
	if c.key.notDir {
		kind = 'f'
	}
	b = append(append(b, cursorVersion, kind), c.key.name...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor decodes what Cursor.String made; "" is the zero Cursor.
// Anything else is a *validate.Error naming field.
func ParseCursor(field, s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	bad := validate.Errorf(field, "is not a cursor of this listing; use next_cursor of the previous page as it is")
	if len(s) > base64.RawURLEncoding.EncodedLen(2+MaxNameLen) {
		return Cursor{}, bad
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	// The decoder skips '\r' and '\n': only the one encoding of a cursor is
	// one.
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != s ||
		len(b) < 3 || b[0] != cursorVersion || (b[1] != 'd' && b[1] != 'f') {
		return Cursor{}, bad
	}
	name := b[2:]
	if len(name) > MaxNameLen || bytes.IndexByte(name, '/') >= 0 || bytes.IndexByte(name, 0) >= 0 ||
		string(name) == "." || string(name) == ".." {
		return Cursor{}, bad
	}
	return Cursor{key: listKey{notDir: b[1] == 'f', name: string(name)}, set: true}, nil
}

// Page is one page of a directory listing.
type Page struct {
	Entries []Entry
	// Next is where the following page starts; zero when this page is the
	// last.
	Next Cursor
}

// List returns the first MaxListLimit entries of directory rel,
// directories first, then by name (byte order); ListPage pages through
// larger directories.
func (r *Root) List(rel string) ([]Entry, error) {
	p, err := r.ListPage(rel, Cursor{}, MaxListLimit)
	return p.Entries, err
}

// direntBufs are ListPage's getdents buffers.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, direntBufSize); return &b }}

// direntBufSize is what one getdents64 call fills: ~800 entries of
// Minecraft-length names, so a 10,000-entry directory takes a dozen calls.
const direntBufSize = 32 << 10

// ListPage returns up to limit (1 to MaxListLimit) entries of directory
// rel that come after cursor after (the zero Cursor: from the start),
// directories first, then by name (byte order). Symlinks are listed as
// links, never followed; entries removed while it runs are left out.
//
// Memory is bounded by limit, not by the directory: names are read in
// batches with getdents64 and only the limit smallest keys after the
// cursor are kept (a max-heap once limit are held), and only those are
// stat'ed. Whether an entry is a directory (its place in the order) comes
// from the directory entry's type, so the order needs no stat.
func (r *Root) ListPage(rel string, after Cursor, limit int) (Page, error) {
	if limit < 1 || limit > MaxListLimit {
		return Page{}, validate.Errorf("limit", "must be an integer from 1 to %d", MaxListLimit)
	}
	var page Page
	err := r.withDir(rel, func(fd int) error {
		keys, more, err := smallestKeys(fd, after, limit)
		if err != nil {
			return err
		}
		slices.SortFunc(keys, compareKeys)
		if more {
			page.Next = Cursor{key: keys[len(keys)-1], set: true}
		}
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.name
		}
		page.Entries, err = entriesAt(fd, names)
		return err
	})
	if err != nil {
		return Page{}, err
	}
	return page, nil
}

// smallestKeys reads directory fd from its start and returns the limit
// smallest keys after after (unordered), and whether there were more.
func smallestKeys(fd int, after Cursor, limit int) (keys []listKey, more bool, err error) {
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	keys = make([]listKey, 0, min(limit, entriesHint(fd)))
	heaped := false
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false, pathErr("getdents64", ".", err)
		}
		if n <= 0 {
			return keys, more, nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8,
			// name (NUL-terminated).
			if off+19 > n {
				break
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				break
			}
			typ := buf[off+18]
			nb := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(nb, 0); i >= 0 {
				nb = nb[:i]
			}
			off += reclen
			if len(nb) == 0 || string(nb) == "." || string(nb) == ".." {
				continue
			}
			// The name as a view of buf: copied only when kept.
			k := listKey{name: unsafe.String(unsafe.SliceData(nb), len(nb))}
			switch typ {
			case unix.DT_DIR:
			case unix.DT_UNKNOWN: // some file systems do not say: ask
				var st unix.Stat_t
				if unix.Fstatat(fd, k.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue // gone meanwhile
				}
				k.notDir = st.Mode&unix.S_IFMT != unix.S_IFDIR
			default:
				k.notDir = true
			}
			if after.set && compareKeys(k, after.key) <= 0 {
				continue
			}
			if len(keys) < limit {
				k.name = strings.Clone(k.name)
				keys = append(keys, k)
				continue
			}
			more = true
			if !heaped {
				heapify(keys)
				heaped = true
			}
			if compareKeys(k, keys[0]) < 0 {
				k.name = strings.Clone(k.name)
				keys[0] = k
				siftDown(keys, 0)
			}
		}
	}
}

// entriesHint guesses from a directory's size how many entries it holds,
// generously (ext4 and xfs count the bytes of their directory blocks, 16
// or more per entry; tmpfs 20 per entry), so a large page is not grown by
// doubling and a small directory does not get a page-sized slice.
func entriesHint(fd int) int {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size <= 0 {
		return 64
	}
	return int(min(st.Size/16+16, MaxListLimit))
}

// heapify makes h a max-heap by compareKeys.
func heapify(h []listKey) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
}

func siftDown(h []listKey, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		big := l
		if r := l + 1; r < len(h) && compareKeys(h[r], h[l]) > 0 {
			big = r
		}
		if compareKeys(h[big], h[i]) <= 0 {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}
