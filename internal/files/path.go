package files

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/validate"
)

// Limits on what a user may name.
const (
	MaxPathLen = 4096 // bytes, as PATH_MAX
	MaxNameLen = 255  // bytes of one component, as NAME_MAX
)

// Clean turns a user's server-relative path ("/plugins/x.yml", "plugins/x.yml",
// "/", "") into a path relative to the root ("plugins/x.yml", "."). A leading
// "/" means the server's root, never the host's. It refuses, with a
// *validate.Error at field, NUL bytes, invalid UTF-8, ".." components (even
// ones that would stay inside: a path names one place, without detours),
// over-long paths and components, and names in Kiln's namespace
// (quota.Reserved: ".kiln-tmp-…", Kiln's temporary files, staging trees
// and restore journals; doc.go, "Kiln's names"). It does not touch the
// file system: symlinks are the resolver's business.
func Clean(field, p string) (string, error) { return clean(field, p, false) }

// CleanRemovable is Clean for a path the user only removes: a name in
// Kiln's namespace is accepted, so that a look-alike Kiln did not make
// (which Kiln never removes on its own) can be deleted by its owner.
func CleanRemovable(field, p string) (string, error) { return clean(field, p, true) }

func clean(field, p string, reservedOK bool) (string, error) {
	switch {
	case len(p) > MaxPathLen:
		return "", validate.Errorf(field, "is longer than %d bytes", MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "", validate.Errorf(field, "must not contain NUL bytes")
	case !utf8.ValidString(p):
		return "", validate.Errorf(field, "must be valid UTF-8")
	}
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for part := range strings.SplitSeq(p, "/") {
		switch part {
		case "", ".":
			continue
		case "..":
			return "", validate.Errorf(field, "must not contain \"..\" segments")
		}
		if len(part) > MaxNameLen {
			return "", validate.Errorf(field, "has a name longer than %d bytes", MaxNameLen)
		}
		if !reservedOK && quota.Reserved(part) {
			return "", validate.Errorf(field, "must not name %q: names starting with %q are reserved for Kiln's temporary files", part, quota.TempPrefix)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// Join cleans dir and name (both user input) and joins them; name may hold
// slashes ("config/a.yml" under "/plugins").
func Join(dirField, dir, nameField, name string) (string, error) {
	return joinUser(dirField, dir, nameField, name, false)
}

// JoinRemovable is Join for a path the user only removes
// (CleanRemovable).
func JoinRemovable(dirField, dir, nameField, name string) (string, error) {
	return joinUser(dirField, dir, nameField, name, true)
}

func joinUser(dirField, dir, nameField, name string, reservedOK bool) (string, error) {
	d, err := clean(dirField, dir, reservedOK)
	if err != nil {
		return "", err
	}
	n, err := clean(nameField, name, reservedOK)
	if err != nil {
		return "", err
	}
	switch {
	case n == ".":
		return d, nil
	case d == ".":
		return n, nil
	}
	j := d + "/" + n
	if len(j) > MaxPathLen {
		return "", validate.Errorf(nameField, "makes a path longer than %d bytes", MaxPathLen)
	}
	return j, nil
}

// Display is the user's form of a root-relative path: "/" + path.
func Display(rel string) string {
	if rel == "." || rel == "" {
		return "/"
	}
	return "/" + rel
}

func validationf(path, format string, args ...any) error {
	return validate.Errorf(path, format, args...)
}

// fieldAt names the field of a batch item: files[3].from.
func fieldAt(list string, i int, field string) string {
	return validate.Join(list, "["+strconv.Itoa(i)+"]", field)
}
