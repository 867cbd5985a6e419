package files

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"

	"golang.org/x/sys/unix"
)

// dirFlags open a directory to work relative to it: never through a
// symlink (O_NOFOLLOW), and only a directory (O_DIRECTORY).
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// dirCache resolves directories of one tree to open descriptors, relative
// to the descriptor of the tree's top, one component at a time with
// openat(O_NOFOLLOW|O_DIRECTORY): a symlink anywhere on the way is refused,
// never followed. It keeps at most max descriptors open that nobody uses
// (least recently used first out), so a tree of 100,000 directories costs
// max descriptors, not 100,000; descriptors in use when evicted are closed
// when released. It is safe for concurrent use.
type dirCache struct {
	top cachedDir // the tree's top (rel "."): never evicted, not closed by the cache
	max int
	// made, when set, is asked before a directory is made and told after
	// (ok: it was made by this call); an error from it refuses the mkdir.
	made func(ok bool) error
	// owner gets the directories the cache makes (nil: kiln's user).
	owner *owner
	mu    sync.Mutex
	dirs  map[string]*cachedDir
	lru   list.List // of *cachedDir, most recently used first
}

// cachedDir is one open directory of a dirCache.
type cachedDir struct {
	rel     string
	fd      int
	refs    int
	elem    *list.Element
	evicted bool // out of the cache while in use: closed at the last release
}

func newDirCache(top, max int, o *owner) *dirCache {
	return &dirCache{top: cachedDir{rel: ".", fd: top}, max: max, owner: o, dirs: make(map[string]*cachedDir)}
}

// acquire returns directory rel (cleaned, relative to the top), opening it
// and its parents as needed; with create, missing directories are made
// (mode 0755 under the umask). The caller releases it.
func (c *dirCache) acquire(rel string, create bool) (*cachedDir, error) {
	if rel == "." {
		return &c.top, nil
	}
	c.mu.Lock()
	if d := c.dirs[rel]; d != nil {
		d.refs++
		c.lru.MoveToFront(d.elem)
		c.mu.Unlock()
		return d, nil
	}
	c.mu.Unlock()
	parent, err := c.acquire(path.Dir(rel), create)
	if err != nil {
		return nil, err
	}
	fd, err := openDirAtHook(parent.fd, path.Base(rel), create, c.made, c.owner)
	c.release(parent)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", rel, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.dirs[rel]; d != nil { // opened meanwhile by another caller
		_ = unix.Close(fd)
		d.refs++
		c.lru.MoveToFront(d.elem)
		return d, nil
	}
	d := &cachedDir{rel: rel, fd: fd, refs: 1}
	d.elem = c.lru.PushFront(d)
	c.dirs[rel] = d
	for len(c.dirs) > c.max {
		old := c.lru.Back().Value.(*cachedDir)
		c.lru.Remove(old.elem)
		delete(c.dirs, old.rel)
		old.evicted = true
		if old.refs == 0 {
			_ = unix.Close(old.fd)
		}
	}
	return d, nil
}

// release gives back a directory from acquire.
func (c *dirCache) release(d *cachedDir) {
	if d == &c.top {
		return
	}
	c.mu.Lock()
	d.refs--
	if d.refs == 0 && d.evicted {
		_ = unix.Close(d.fd)
	}
	c.mu.Unlock()
}

// forget drops rel and everything cached below it (moved away or removed:
// a later acquire must look again rather than use the old descriptor).
func (c *dirCache) forget(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prefix := rel + "/"
	for k, d := range c.dirs {
		if k != rel && (len(k) <= len(prefix) || k[:len(prefix)] != prefix) {
			continue
		}
		c.lru.Remove(d.elem)
		delete(c.dirs, k)
		d.evicted = true
		if d.refs == 0 {
			_ = unix.Close(d.fd)
		}
	}
}

// open is the number of descriptors the cache holds (tests).
func (c *dirCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dirs)
}

// close closes every cached descriptor (not the top's); nothing may be in
// use.
func (c *dirCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.dirs {
		delete(c.dirs, k)
		d.evicted = true
		if d.refs == 0 {
			_ = unix.Close(d.fd)
		}
	}
	c.lru.Init()
}

// openDirAt opens directory name of parent without following a symlink;
// with create, a missing one is made first. A symlink is ErrSymlink, any
// other non-directory ErrNotDirectory.
func openDirAt(parent int, name string, create bool) (int, error) {
	return openDirAtHook(parent, name, create, nil, nil)
}

// openDirAtHook is openDirAt asking made (if set) before it makes a
// directory, and telling it whether it did; a directory it makes goes to
// o (nil: kiln's user).
func openDirAtHook(parent int, name string, create bool, made func(ok bool) error, o *owner) (int, error) {
	for {
		fd, err := unix.Openat(parent, name, dirFlags, 0)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR:
			continue
		case errors.Is(err, unix.ENOENT) && create:
			if made != nil {
				if err := made(false); err != nil {
					return -1, err
				}
			}
			err := unix.Mkdirat(parent, name, 0o755)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, pathErr("mkdirat", name, err)
			}
			if err == nil {
				if err := o.ownAt(parent, name); err != nil {
					return -1, err
				}
			}
			if made != nil && err == nil {
				_ = made(true)
			}
			create = false // made (or made meanwhile by someone else): open it
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			if isSymlinkAt(parent, name) {
				return -1, ErrSymlink
			}
			return -1, ErrNotDirectory
		}
		return -1, pathErr("openat", name, err)
	}
}

// isSymlinkAt tells whether name in parent is a symbolic link.
func isSymlinkAt(parent int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// pathErr is a *PathError classified as the errors of this package are
// (ENOENT is ErrNotFound, EEXIST ErrExists…; anything else stays itself);
// nil for nil.
func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return classify(&os.PathError{Op: op, Path: name, Err: err})
}
