package archive

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
)

// linkCase is one symlink in the tree TestCompressLinks archives.
type linkCase struct {
	name, target string
	kept         bool // stored and restored; false: left out
}

// linkCases: name is relative to the archived directory src (root/src);
// the world around it has root/outside... (see newWorld).
func linkCases(w *world) []linkCase {
	return []linkCase{
		{"plugins/cfg", "../config", true},      // up, then down: inside
		{"latest.log", "logs/2026.log", true},   // a file
		{"a", "b", true},                        // a chain a -> b -> c -> file
		{"b", "c", true},                        //
		{"c", "world/level.dat", true},          //
		{"gone", "missing/file", true},          // dangling, inside
		{"sub/up", "..", true},                  // src itself
		{"via-up", "sub/up/config/a.yml", true}, // through sub/up: src/config/a.yml
		{"esc", "sub/up/../..", false},          // a ".." after a name: out on disk through sub/up
		{"up2", "../..", false},                 // out of the root
		{"sib", "../sibling", false},            // inside the root, outside what is archived
		{"deep/out", "../../outside", false},    // lexically out of src
		{"abs", "/etc/passwd", false},           // absolute: a host path
		{"abs-in", "/config/a.yml", false},      // absolute, even if it reads like the root's
		{"outside-dir", filepath.Join(w.base, "outside"), false},
		{"evil", "/", false},                            //
		{"via-evil", "evil/etc/passwd", false},          // no "..", but through an absolute link
		{"escdir", "../../..", false},                   //
		{"via-escdir", "escdir/etc/passwd", false},      // through a link that leads out
		{"c1", "c2", false},                             // a chain whose end leads out
		{"c2", "sub/up/../../../outside/passwd", false}, //
		{"loop1", "loop2", false},                       // a loop: never resolves
		{"loop2", "loop1", false},                       //
		{"self", "self/x", false},                       // a loop through itself
	}
}

// TestCompressLinks archives a tree with links that stay inside and links
// that lead out (lexically, through other links, absolute, loops) in each
// format, extracts it into another directory and finds exactly the links
// that stay inside, with their targets, and the files.
func TestCompressLinks(t *testing.T) {
	for _, format := range []Format{TarGz, Zip, TarZst} {
		t.Run(string(format), func(t *testing.T) {
			w := newWorld(t)
			src := filepath.Join(w.root, "src")
			writeFile(t, src, "config/a.yml", "a: 1\n", 0o644)
			writeFile(t, src, "logs/2026.log", "started\n", 0o644)
			writeFile(t, src, "world/level.dat", "level", 0o644)
			writeFile(t, w.root, "sibling", "next to src", 0o644)
			cases := linkCases(w)
			for _, c := range cases {
				p := filepath.Join(src, c.name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.target, p); err != nil {
					t.Fatal(err)
				}
			}
			outside := w.outside(t)

			e, err := Compress(t.Context(), w.r, "src", []string{"src"}, format, budget(1<<30))
			if err != nil {
				t.Fatalf("Compress = %v", err)
			}
			if err := os.Mkdir(filepath.Join(w.root, "dst"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Decompress(t.Context(), w.r, "src/"+e.Name, "dst", budget(1<<30)); err != nil {
				t.Fatalf("Decompress = %v", err)
			}
			dst := filepath.Join(w.root, "dst")
			for _, c := range cases {
				got, err := os.Readlink(filepath.Join(dst, c.name))
				switch {
				case c.kept && (err != nil || got != c.target):
					t.Errorf("%s: link -> %q, %v; want -> %q", c.name, got, err, c.target)
				case !c.kept && !os.IsNotExist(err):
					t.Errorf("%s -> %q stored (extracted -> %q, %v); want it left out", c.name, c.target, got, err)
				}
			}
			for _, f := range []string{"config/a.yml", "logs/2026.log", "world/level.dat"} {
				if readString(t, filepath.Join(dst, f)) != readString(t, filepath.Join(src, f)) {
					t.Errorf("%s differs after the round trip", f)
				}
			}
			if d := diffSnapshots(outside, w.outside(t)); d != "" {
				t.Errorf("outside the root changed:\n%s", d)
			}
		})
	}
}

// TestCompressLinksOfTheRoot: archiving the root itself, a link up to the
// root's parent is left out and one to a sibling directory kept.
func TestCompressLinksOfTheRoot(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "plugins/x.yml", "x", 0o644)
	for name, target := range map[string]string{"p": "plugins", "world/p": "../plugins/x.yml", "up": "..", "other": "../other"} {
		p := filepath.Join(w.root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	e, err := Compress(t.Context(), w.r, ".", []string{"."}, TarGz, budget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(w.root, e.Name))
	if err != nil {
		t.Fatal(err)
	}
	var links []string
	for _, h := range tarEntries(t, data) {
		if h.Linkname != "" {
			links = append(links, h.Name+" -> "+h.Linkname)
		}
	}
	slices.Sort(links)
	if want := []string{"p -> plugins", "world/p -> ../plugins/x.yml"}; !slices.Equal(links, want) {
		t.Errorf("links in the archive = %q, want %q", links, want)
	}
}

// TestCompressSkipsHardLinks: a file sharing its inode with a file outside
// the root (as `ln /etc/shadow plugins/x` would plant it) is never read
// into an archive; neither are two names of one file inside (Kiln cannot
// tell where a file's other names are).
func TestCompressSkipsHardLinks(t *testing.T) {
	for _, format := range []Format{TarGz, Zip, TarZst} {
		t.Run(string(format), func(t *testing.T) {
			w := newWorld(t)
			writeFile(t, w.root, "plugins/ok.yml", "ok", 0o644)
			if err := os.Link(filepath.Join(w.base, "outside/passwd"), filepath.Join(w.root, "plugins/x")); err != nil {
				t.Fatal(err)
			}
			writeFile(t, w.root, "world/a", "shared inside", 0o644)
			if err := os.Link(filepath.Join(w.root, "world/a"), filepath.Join(w.root, "world/b")); err != nil {
				t.Fatal(err)
			}
			e, err := Compress(t.Context(), w.r, ".", []string{"plugins", "world"}, format, budget(1<<30))
			if err != nil {
				t.Fatalf("Compress = %v", err)
			}
			raw, err := os.ReadFile(filepath.Join(w.root, e.Name))
			if err != nil {
				t.Fatal(err)
			}
			if format == Zip && strings.Contains(string(raw), "root:x:0:0") {
				t.Errorf("the archive holds the outside file's content")
			}
			if err := os.Mkdir(filepath.Join(w.root, "dst"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Decompress(t.Context(), w.r, e.Name, "dst", budget(1<<30)); err != nil {
				t.Fatalf("Decompress = %v", err)
			}
			got := snapshot(t, filepath.Join(w.root, "dst"), false)
			var names []string
			for k := range got {
				names = append(names, k)
			}
			slices.Sort(names)
			if want := []string{".", "plugins", "plugins/ok.yml", "world"}; !slices.Equal(names, want) {
				t.Errorf("extracted %q, want %q", names, want)
			}
		})
	}
}

// TestLinkRefusal: what Decompress creates and Compress stores.
func TestLinkRefusal(t *testing.T) {
	for _, tc := range []struct {
		rel, target string
		ok          bool
	}{
		{"a", "b", true},
		{"a/b", "../c", true},
		{"a/b/c", "../../d/e", true},
		{"a/b", "./c/./d", true},
		{"a/b", ".././c", true},
		{"a", "../x", false},       // out of the root
		{"a", "/etc", false},       // absolute
		{"a/b", "c/../d", false},   // ".." after a name
		{"a/b", "up/../..", false}, // the escape through a link "up" -> ".."
		{"a", "", false},
	} {
		if got := linkRefusal(tc.rel, tc.target); (got == "") != tc.ok {
			t.Errorf("linkRefusal(%q, %q) = %q, want ok=%v", tc.rel, tc.target, got, tc.ok)
		}
	}
}

// FuzzLinkRefusal: a target that passes never leads above the root when
// followed lexically from rel, and its ".." segments all come first.
// Seeds: the escape through a link ("up" -> "..", then "up/../..").
func FuzzLinkRefusal(f *testing.F) {
	f.Add("x", "up/../..")
	f.Add("a/b", "../../x")
	f.Add("a/b", "c/./../../d")
	f.Add("a", "./../a")
	f.Fuzz(func(t *testing.T, rel, target string) {
		if c, err := files.Clean("rel", rel); err != nil || c != rel || rel == "." {
			return // a link's place is always a cleaned path
		}
		if linkRefusal(rel, target) != "" {
			return
		}
		depth := strings.Count(rel, "/") // directories above rel's place
		named := false
		for seg := range strings.SplitSeq(target, "/") {
			switch seg {
			case "", ".":
			case "..":
				if named {
					t.Fatalf("linkRefusal(%q, %q) accepts a \"..\" after a name", rel, target)
				}
				if depth--; depth < 0 {
					t.Fatalf("linkRefusal(%q, %q) accepts a target above the root", rel, target)
				}
			default:
				named = true
			}
		}
	})
}

// TestDecompressLinkFromRealPlace: extracting into a directory reached
// through a link ("a" -> "."), a link target is judged from where the
// directory really is: "../../y" from a/b stays inside on paper, and from
// b, the real place, leads out. The refusal is the archive's.
func TestDecompressLinkFromRealPlace(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "b/keep.txt", "keep", 0o644)
	if err := os.Symlink(".", filepath.Join(w.root, "a")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.root, "x.tar", string(tarOf(t, symlink("x", "../../y"))), 0o644)
	before := snapshot(t, w.root, false)
	err := Decompress(t.Context(), w.r, "x.tar", "a/b", budget(1<<30))
	if !isEntry(err) {
		t.Fatalf("Decompress into a/b = %v (%T), want an *EntryError", err, err)
	}
	if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
		t.Errorf("root changed:\n%s", d)
	}
}
