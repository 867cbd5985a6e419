package files

import (
	"os"

	"golang.org/x/sys/unix"
)

// owner is the user that entries Kiln creates in a root belong to: the
// root directory's own owner, when kiln runs as root and the root is not
// root's (a server with a user of its own, internal/servers). nil: entries
// keep kiln's user, as they would anyway.
type owner struct{ uid, gid int }

// ownerOf reads the owner of the root open as fd. The root directory's
// owner cannot be changed by its server (only root chowns), so what it
// says is what Kiln set.
func ownerOf(fd int) *owner {
	if os.Geteuid() != 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Uid == 0 {
		return nil
	}
	return &owner{uid: int(st.Uid), gid: int(st.Gid)}
}

// ownFD gives the entry open as fd, which Kiln just created, to the
// root's owner.
func (o *owner) ownFD(fd int) error {
	if o == nil {
		return nil
	}
	if err := unix.Fchown(fd, o.uid, o.gid); err != nil {
		return &os.PathError{Op: "fchown", Path: "(new entry)", Err: err}
	}
	return nil
}

// ownAt gives name in directory dirfd (just created by Kiln; a link
// itself, never its target) to the root's owner.
func (o *owner) ownAt(dirfd int, name string) error {
	if o == nil {
		return nil
	}
	if err := unix.Fchownat(dirfd, name, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("fchownat", name, err)
	}
	return nil
}

// ownRel gives root-relative rel (just created by Kiln) to the root's
// owner, through the os.Root (a link itself, never its target).
func (r *Root) ownRel(rel string) error {
	if r.owner == nil {
		return nil
	}
	return classify(r.r.Lchown(rel, r.owner.uid, r.owner.gid))
}
