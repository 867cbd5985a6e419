package archive

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/kilnhq/kiln/internal/files"
)

// Links, both ways (see doc.go). A link target is stored in an archive,
// or created from one, only when it is relative, stays inside lexically
// (files.LinkTarget) and has all its ".." segments first: "../../a/b",
// never "a/../b". Leading ".." segments climb the real directories the
// link lies in; a ".." after a name could climb out of whatever that name
// is, and the name may be another link ("up" -> "..", then "x" ->
// "up/../.." stays inside on paper and leads out of the root on disk).

// linkRefusal says why a symlink at rel (root-relative, its final place)
// to target may not be created, or "".
func linkRefusal(rel, target string) string {
	if err := files.LinkTarget("entry", rel, target); err != nil {
		return issue(err, "has an invalid link target")
	}
	if !files.DotDotsFirst(target) {
		return "links to " + quoteCut(target) + `, with a ".." after a name: it could lead out of the server's root through another link`
	}
	return ""
}

// quoteCut quotes s, cut at 200 bytes, for a message.
func quoteCut(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

// keepLink tells whether Compress stores symlink rel (root-relative),
// archived as name (relative to the archive's top), to target: the
// target must pass linkRefusal from name, so that it is created wherever
// the archive is extracted, and must not lead out of the root on disk,
// following the links on its way and its directory's
// (files.Root.LinkInside).
func keepLink(r *files.Root, rel, name, target string) bool {
	return linkRefusal(name, target) == "" && r.LinkInside(rel, target)
}

// hardLinked reports whether open regular file f has more than one hard
// link. Compress leaves such a file out, unread: a hard link planted in
// the root (`ln /etc/shadow plugins/x`, on the same file system) shares
// its inode, and so its content, with a file outside, and nothing tells
// where its other names are (files.ErrHardLink: Kiln never reads one).
func hardLinked(f *os.File) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, errors.New("archive: no stat_t")
	}
	return st.Nlink > 1, nil
}
