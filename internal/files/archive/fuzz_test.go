package archive

import (
	"errors"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
)

// FuzzEntryName: whatever an archive calls an entry, a name that passes is
// clean, relative and without "..", and one that fails is an *EntryError.
func FuzzEntryName(f *testing.F) {
	for _, s := range []string{
		"a/b", "./a", "a/../../etc", "../x", "/etc/passwd", "a\x00b", "a//b/", ".", "",
		"..", "a/..", `..\..\x`, "caf\xe9", strings.Repeat("a/", 3000), ".kiln-tmp-x/y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		name, err := entryName(raw)
		if err != nil {
			if _, ok := errors.AsType[*EntryError](err); !ok {
				t.Fatalf("entryName(%q) = %v, want an *EntryError", raw, err)
			}
			return
		}
		if c, err := files.Clean("x", name); err != nil || c != name {
			t.Fatalf("entryName(%q) = %q, which Clean changes to %q, %v", raw, name, c, err)
		}
		if strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") ||
			strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") || strings.ContainsRune(name, 0) {
			t.Fatalf("entryName(%q) = %q: not a clean relative name", raw, name)
		}
	})
}
