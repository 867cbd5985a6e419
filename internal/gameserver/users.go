package gameserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/runtime"
)

// UIDRange is the range of user ids (and group ids, the same numbers) the
// servers of this node run as, one each (--uid-range). The zero range
// means none: servers run as kiln's own user.
type UIDRange struct{ First, Last uint32 }

// DefaultUIDRange is --uid-range's default: above the ids distributions
// hand out (useradd stops at 60000; systemd's dynamic users end at 65519
// and its container range starts at 524288), 100,000 servers per node.
var DefaultUIDRange = UIDRange{First: 200000, Last: 299999}

// ParseUIDRange reads "FIRST-LAST" (both above 0, FIRST ≤ LAST, at most
// 2^31-2) or "off" (the zero range).
func ParseUIDRange(s string) (UIDRange, error) {
	if s == "off" {
		return UIDRange{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || first == 0 || first > last || last > 1<<31-2 {
		return UIDRange{}, fmt.Errorf("%q: want FIRST-LAST (1 ≤ FIRST ≤ LAST < 2147483647) or off", s)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

func (r UIDRange) String() string {
	if r.IsZero() {
		return "off"
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// IsZero reports whether the range is off.
func (r UIDRange) IsZero() bool { return r == UIDRange{} }

// Contains reports whether id is in the range.
func (r UIDRange) Contains(id uint32) bool { return !r.IsZero() && id >= r.First && id <= r.Last }

// CheckUIDRange refuses a range holding the id of a user or a group the
// host already has (passwd and group files, /etc/passwd and /etc/group):
// a server running as that id would be that user, and could read its
// files.
func CheckUIDRange(r UIDRange, passwd, group string) error {
	for _, f := range []struct{ path, what string }{{passwd, "user"}, {group, "group"}} {
		b, err := os.ReadFile(f.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", f.path, err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) < 3 {
				continue
			}
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err == nil && r.Contains(uint32(id)) {
				return fmt.Errorf("the range %s holds the %s %s (id %d, %s): servers would run as it; choose a free range", r, f.what, fields[0], id, f.path)
			}
		}
	}
	return nil
}

// users hands out the ids of UIDRange. A server's id is its root
// directory's owner: the one record of it, made by a chown only root can
// do, kept with the files it protects (and read by internal/files to give
// what Kiln writes in the root to the same user). Ids in use are learnt
// from the roots once, then kept here; a new one is picked at random among
// the free ones, so that an id freed by a deleted server is not soon
// another's (it may still own files outside the root, in /tmp).
type users struct {
	rng  UIDRange
	dir  string // the node's roots
	mu   sync.Mutex
	used map[uint32]string // id → server id; nil until loaded
}

// load reads the owners of the roots under u.dir; u.mu is held.
func (u *users) load() error {
	if u.used != nil {
		return nil
	}
	u.used = map[uint32]string{}
	entries, err := os.ReadDir(u.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		u.used = nil
		return fmt.Errorf("list the server roots: %w", err)
	}
	for _, e := range entries {
		if _, err := uuid.Parse(e.Name()); err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(u.dir, e.Name()), &st); err == nil && u.rng.Contains(st.Uid) {
			u.used[st.Uid] = e.Name()
		}
	}
	return nil
}

// forID returns the user of server id's root (root must exist): its
// owner if that is an id of the range the server holds alone, else a new
// free id, given to the root (mode 0700: no other server's user may
// enter it). Errors: a full range, a failed chown.
func (u *users) forID(id, root string) (runtime.User, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.load(); err != nil {
		return runtime.User{}, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return runtime.User{}, fmt.Errorf("stat the server root: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return runtime.User{}, fmt.Errorf("the server root %s is not a directory", root)
	}
	uid := st.Uid
	if !u.rng.Contains(uid) || (u.used[uid] != "" && u.used[uid] != id) {
		var err error
		if uid, err = u.pick(); err != nil {
			return runtime.User{}, err
		}
	}
	if st.Uid != uid || st.Gid != uid {
		if err := unix.Lchown(root, int(uid), int(uid)); err != nil {
			return runtime.User{}, fmt.Errorf("give the server root to its user: %w", err)
		}
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Chmod(root, 0o700); err != nil {
			return runtime.User{}, fmt.Errorf("close the server root to others: %w", err)
		}
	}
	u.used[uid] = id
	return runtime.User{UID: uid, GID: uid}, nil
}

// pick chooses a free id at random; u.mu is held.
func (u *users) pick() (uint32, error) {
	n := uint64(u.rng.Last-u.rng.First) + 1
	if uint64(len(u.used)) >= n {
		return 0, fmt.Errorf("every user id of the range %s is taken: widen --uid-range", u.rng)
	}
	for {
		uid := u.rng.First + uint32(rand.Uint64N(n))
		if _, taken := u.used[uid]; !taken {
			return uid, nil
		}
	}
}

// release forgets the id of a deleted server.
func (u *users) release(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for uid, sid := range u.used {
		if sid == id {
			delete(u.used, uid)
		}
	}
}

// runAs returns the user server id runs as, its root made its own first
// (node.OwnTree: whatever Kiln's user wrote there since, an installer's
// output or a restore, becomes the server's), or nil when servers run as
// kiln's user. It runs before each start, the server stopped.
func (h *Host) runAs(id string) (*runtime.User, error) {
	if h.users == nil {
		return nil, nil
	}
	root := h.node.Root(id)
	usr, err := h.users.forID(id, root)
	if err != nil {
		return nil, err
	}
	changed, skipped, err := node.OwnTree(root, int(usr.UID), int(usr.GID))
	if err != nil {
		return nil, fmt.Errorf("give the server's files to its user: %w", err)
	}
	if skipped > 0 {
		h.log.Warn("files left to kiln's user: regular files with several links (one may be outside the root) or over 512 levels deep",
			"server_id", id, "count", skipped)
	}
	if changed > 0 {
		h.log.Debug("files given to the server's user", "server_id", id, "uid", usr.UID, "count", changed)
	}
	return &usr, nil
}
