package ignore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestConformanceWithGit checks Match, and the git port the fuzz test
// relies on, against `git check-ignore --no-index` for every ignore text
// of the corpus and every path of one tree of files and directories made
// on disk (git lstat()s a path to learn whether it is a directory).
func TestConformanceWithGit(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("SKIPPING CONFORMANCE WITH GIT: git not found in PATH; gitignore semantics NOT checked against git")
	}
	cases := corpus()
	tree := buildTree(t, cases)
	repo := t.TempDir()
	makeTree(t, repo, tree)
	git := func(stdin []byte, args ...string) ([]byte, error) {
		cmd := exec.Command(gitBin, append([]string{
			"-c", "core.excludesFile=/dev/null", "-c", "core.ignoreCase=false",
		}, args...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		cmd.Stdin = bytes.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.Bytes())
		}
		return out, err
	}
	if _, err := git(nil, "init", "-q"); err != nil {
		t.Fatalf("git init: %v", err)
	}
	// Only our .gitignore may count: empty the template's exclude file.
	if err := os.WriteFile(filepath.Join(repo, ".git", "info", "exclude"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// git learns from lstat() that a path is a directory, so the tree is
	// made on disk and asked about without a trailing "/". A query "a/"
	// is not the directory a: git checks a as a parent, then an entry
	// with an empty name inside it, which "/", "a/**", "*/*" or "*" then
	// "!a/" exclude while they leave a itself alone.
	var stdin []byte
	for _, p := range tree {
		stdin = append(append(stdin, strings.TrimSuffix(p, "/")...), 0)
	}
	checkIgnore := func(name string) map[string]bool {
		t.Helper()
		out, err := git(stdin, "check-ignore", "--no-index", "--stdin", "-z")
		if exit, ok := errors.AsType[*exec.ExitError](err); ok && exit.ExitCode() == 1 {
			err = nil // exit 1: nothing is ignored
		}
		if err != nil {
			t.Fatalf("git check-ignore for %s: %v", name, err)
		}
		ignored := map[string]bool{}
		for p := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			ignored[p] = true
		}
		return ignored
	}

	checked, excluded, diverged, lines := 0, 0, 0, map[string]bool{}
	for _, c := range cases {
		if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		ignored := checkIgnore(c.name)
		m, err := Parse(c.text)
		if err != nil {
			t.Fatalf("%s: Parse(%q): %v", c.name, c.text, err)
		}
		pl := refParse(c.text)
		for l := range strings.SplitSeq(c.text, "\n") {
			if l != "" {
				lines[l] = true
			}
		}
		for _, p := range tree {
			path, isDir := strings.CutSuffix(p, "/")
			want := ignored[path]
			got, port := m.Match(path, isDir), refExcluded(pl, path, isDir)
			checked++
			if want {
				excluded++
			}
			if got != want || port != want {
				diverged++
				if diverged <= 40 {
					t.Errorf("%s: ignore text %q, path %q (dir %v): git %v, Match %v, git port %v",
						c.name, c.text, path, isDir, want, got, port)
				}
			}
		}
	}
	t.Logf("conformance with %s: %d ignore texts (%d distinct lines) × %d paths = %d cases (%d excluded by git), %d diverged",
		gitBin, len(cases), len(lines), len(tree), checked, excluded, diverged)
}

// gitCase is one ignore text of the corpus, with paths it is about;
// every case is checked on the paths of all cases.
type gitCase struct {
	name  string
	text  string
	paths []string // a trailing "/" marks a directory
}

// corpus returns the hand-picked cases, each pattern generated from
// path segments alone, and mixes of generated patterns and negations.
func corpus() []gitCase {
	cases := slices.Clone(handCases)
	rng := rand.New(rand.NewPCG(1, 2))
	var patterns []string
	seen := map[string]bool{}
	for len(patterns) < 400 {
		p := genPattern(rng)
		if !seen[p] {
			seen[p] = true
			patterns = append(patterns, p)
			cases = append(cases, gitCase{name: fmt.Sprintf("generated %d", len(patterns)), text: p + "\n"})
		}
	}
	for i := range 200 {
		var b strings.Builder
		for range 2 + rng.IntN(4) {
			p := patterns[rng.IntN(len(patterns))]
			if rng.IntN(3) == 0 && !strings.HasPrefix(p, "!") {
				p = "!" + p
			}
			b.WriteString(p + "\n")
		}
		cases = append(cases, gitCase{name: fmt.Sprintf("mixed %d", i+1), text: b.String()})
	}
	return cases
}

var segments = []string{
	"a", "b", "x", "abc", "logs", "cache", "build", "foo", "keep.log", "b.txt", "x y", "é",
	"*.log", "*", "**", "?", "a*", "*b*", "?.log", "*.txt", "a?c", "**.log", "*/", "***",
	"[a-c]", "[!a]*", "[^a]*", "[ab]?c", "[[:alpha:]]*", "[a]", `\[a]`, "[]a]*", "[a-]*", "[!k]eep.log",
	`\#x`, "#x", `\!x`, `foo\ `, `\*`, `a\bc`, "logs ",
}

// genPattern makes a pattern of one to three segments, maybe negated,
// anchored or for directories only.
func genPattern(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(5) == 0 {
		b.WriteString("!")
	}
	if rng.IntN(4) == 0 {
		b.WriteString("/")
	}
	for i := range 1 + rng.IntN(3) {
		if i > 0 {
			b.WriteString("/")
		}
		b.WriteString(segments[rng.IntN(len(segments))])
	}
	if rng.IntN(4) == 0 {
		b.WriteString("/")
	}
	return b.String()
}

// baseTree is the part of the tree every case is checked on: the
// segments' names at several depths, as files and as directories.
func baseTree() []string {
	leaves := []string{"a.log", "keep.log", "b.txt", "x", "abc", "foo ", "#x", "!x", "é", "A", "a?c", "aXc", "logs "}
	var paths []string
	for _, d := range []string{"a", "b", "logs", "cache", "build", "foo", "x y", "[a]", "node_modules"} {
		paths = append(paths, d+"/")
		for _, l := range leaves {
			paths = append(paths, d+"/"+l)
		}
		for _, s := range []string{"a", "b", "cache", "logs"} {
			s = d + "/" + s + "/"
			paths = append(paths, s+"a.log", s+"keep.log", s+"x", s+"b/a.log", s+"b/keep.log", s+"b/c/x")
		}
	}
	return append(paths, leaves...)
}

// buildTree is baseTree with every case's paths and all their parent
// directories, sorted. A path both a file and a directory is a mistake
// in the corpus.
func buildTree(t *testing.T, cases []gitCase) []string {
	t.Helper()
	kind := map[string]bool{} // path → is a directory
	add := func(p string) {
		path, isDir := strings.CutSuffix(p, "/")
		for i := range len(path) {
			if path[i] == '/' {
				if d, ok := kind[path[:i]]; ok && !d {
					t.Fatalf("corpus: %q is a file and a directory", path[:i])
				}
				kind[path[:i]] = true
			}
		}
		if d, ok := kind[path]; ok && d != isDir {
			t.Fatalf("corpus: %q is a file and a directory", path)
		}
		kind[path] = isDir
	}
	for _, p := range baseTree() {
		add(p)
	}
	for _, c := range cases {
		for _, p := range c.paths {
			add(p)
		}
	}
	var tree []string
	for p, isDir := range kind {
		if strings.HasPrefix(p, ":") || p == ".gitignore" || strings.HasPrefix(p, ".git/") {
			t.Fatalf("corpus: %q cannot be asked of git check-ignore", p)
		}
		if isDir {
			p += "/"
		}
		tree = append(tree, p)
	}
	slices.Sort(tree)
	return tree
}

func makeTree(t *testing.T, root string, tree []string) {
	t.Helper()
	for _, p := range tree {
		path, isDir := strings.CutSuffix(p, "/")
		full := filepath.Join(root, filepath.FromSlash(path))
		var err error
		if isDir {
			err = os.MkdirAll(full, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(full), 0o755); err == nil {
			err = os.WriteFile(full, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// handCases are the edge cases of gitignore(5) and wildmatch, one rule
// or quirk each, with the paths that tell them apart.
var handCases = []gitCase{
	{name: "comment", text: "#x\n", paths: []string{"#x"}},
	{name: "escaped hash", text: `\#x` + "\n"},
	{name: "hash inside", text: "a#b\n #x\n", paths: []string{"a#b", " #x"}},
	{name: "trailing spaces", text: "x   \n"},
	{name: "escaped trailing space", text: `foo\ ` + "\n"},
	{name: "escaped space then spaces", text: `foo\   ` + "\n"},
	{name: "two escaped spaces", text: `x\ \ ` + "\n", paths: []string{"x  "}},
	{name: "space inside", text: "x y\n"},
	{name: "only spaces", text: "   \n", paths: []string{"   "}},
	{name: "trailing tab kept", text: "x\t\n", paths: []string{"x\t"}},
	{name: "CRLF", text: "x\r\nabc\r\n", paths: []string{"x\r"}},
	{name: "CR alone", text: "\r\n"},
	{name: "CR inside", text: "a\rb\n", paths: []string{"a\rb"}},
	{name: "no final newline", text: "x"},
	{name: "BOM", text: "\ufeffx\n"},
	{name: "BOM comment", text: "\ufeff#x\n"},
	{name: "BOM twice", text: "\ufeff\ufeffx\n", paths: []string{"\ufeffx"}},
	{name: "negation", text: "*.log\n!keep.log\n"},
	{name: "negation first", text: "!keep.log\n*.log\n"},
	{name: "escaped bang", text: `\!x` + "\n"},
	{name: "bang alone", text: "!\n", paths: []string{"!"}},
	{name: "bang slash", text: "!/\n*\n"},
	{name: "double bang", text: "!!x\n", paths: []string{"!!x"}},
	{name: "dir only", text: "logs/\n"},
	{name: "dir only and negated file", text: "logs/\n!logs/keep.log\n!keep.log\n"},
	{name: "anchored", text: "/x\n"},
	{name: "anchored dir", text: "/logs/\n"},
	{name: "middle slash", text: "a/x\n"},
	{name: "double leading slash", text: "//x\n"},
	{name: "double trailing slash", text: "logs//\n"},
	{name: "slash", text: "/\n"},
	{name: "slash slash", text: "//\n"},
	{name: "star", text: "*\n"},
	{name: "star dir", text: "*/\n"},
	{name: "anchored star", text: "/*\n"},
	{name: "star star", text: "*/*\n"},
	{name: "star in path", text: "a/*/x\n"},
	{name: "star log", text: "*.log\n"},
	{name: "star does not cross", text: "a/*.log\n"},
	{name: "question", text: "?\n"},
	{name: "question in path", text: "a/?/x\n"},
	{name: "question rune", text: "?\n??\n", paths: []string{"ü", "s/é"}},
	{name: "leading starstar", text: "**/cache\n"},
	{name: "leading starstar dir", text: "**/b/\n"},
	{name: "trailing starstar", text: "a/**\n"},
	{name: "trailing starstar dir", text: "a/**/\n"},
	{name: "middle starstar", text: "a/**/x\n", paths: []string{"a/xb", "ax/x"}},
	{name: "starstar", text: "**\n"},
	{name: "anchored starstar", text: "/**\n"},
	{name: "starstar slash", text: "**/\n"},
	{name: "starstar starstar", text: "**/**/x\n"},
	{name: "starstar chain", text: "a/**/**/b/**/x\n"},
	{name: "starstar in name", text: "a**\n**x\n", paths: []string{"az", "zx"}},
	{name: "starstar after name", text: "a/b**/x\n", paths: []string{"a/bz/q/x"}},
	{name: "starstar prefix quirk", text: "foo**/bar\n", paths: []string{"foo/bar", "fooX/bar", "fooX/y/bar", "fooY/y/z/bar"}},
	{name: "starstar prefix end", text: "a/ca**\n"},
	{name: "starstar mid name", text: "a/x**y/c\n", paths: []string{"a/xzy/c", "a/xz/y/c"}},
	{name: "starstar escaped slash", text: `a/**\/x` + "\n"},
	{name: "triple star", text: "a/***/x\n"},
	{name: "starstar log", text: "**/*.log\n"},
	{name: "starstar name", text: "**.log\n"},
	{name: "class", text: "[abc]\n", paths: []string{"c", "d"}},
	{name: "range", text: "[a-c]?\n", paths: []string{"bx", "dx"}},
	{name: "negated class", text: "[!a]*\n"},
	{name: "caret class", text: "[^a]*\n"},
	{name: "bracket member", text: "[]a]\n", paths: []string{"]"}},
	{name: "negated bracket member", text: "[!]a]\n"},
	{name: "dash last", text: "[a-]\n", paths: []string{"-"}},
	{name: "dash first", text: "[-a]\n"},
	{name: "range then dash", text: "[a-c-e]\n", paths: []string{"e", "d"}},
	{name: "reversed range", text: "[z-a]\n", paths: []string{"z", "m"}},
	{name: "escaped bracket", text: `[\]]` + "\n"},
	{name: "escaped range end", text: `[a-\c]` + "\n", paths: []string{"c"}},
	{name: "escaped range start", text: `[\a-c]` + "\n"},
	{name: "range over slash", text: "a[.-0]x\n", paths: []string{"a.x", "a0x", "a-x"}},
	{name: "class of slash", text: "a[/]x\n"},
	{name: "negated class vs slash", text: "a[!b]x\n", paths: []string{"a/x"}},
	{name: "named classes", text: "x[[:alpha:]]\nx[[:digit:]]\n", paths: []string{"xa", "x1", "x_"}},
	{name: "space class", text: "x[[:space:]]\n", paths: []string{"x ", "x\t", "x\v", "x\f", "x\n"}},
	{name: "blank class", text: "x[[:blank:]]\n"},
	{name: "punct class", text: "x[[:punct:]]\n", paths: []string{"x_", "x~"}},
	{name: "cntrl class", text: "x[[:cntrl:]]\n", paths: []string{"x\x01", "x\x7f"}},
	{name: "graph print class", text: "[[:graph:]][[:print:]]\n"},
	{name: "upper lower class", text: "[[:upper:]]\n[[:lower:]][[:lower:]]\n"},
	{name: "xdigit alnum class", text: "[[:xdigit:]][[:alnum:]]\n"},
	{name: "class and members", text: "[[:upper:]x]\n"},
	{name: "class in range", text: "[[:digit:]-z]\n"},
	{name: "unknown class", text: "[[:bogus:]]\n*.log\n"},
	{name: "colon no class end", text: "[[:a]x\n", paths: []string{"[x", "s/:x"}},
	{name: "colon bracket empty", text: "[[:]x\n"},
	{name: "colon colon", text: "[[::]]x\n"},
	{name: "unclosed class", text: "[a\n*.txt\n", paths: []string{"[a"}},
	{name: "unclosed class name", text: "[[:alpha:]\n"},
	{name: "empty class", text: "[]\n[!]\n", paths: []string{"[]"}},
	{name: "class bytes", text: "[é]\n[é][é]\n"},
	{name: "escaped star", text: `a\*b` + "\n", paths: []string{"a*b", "axb"}},
	{name: "escaped question", text: `a\?c` + "\n"},
	{name: "escaped letter", text: `a\bc` + "\n"},
	{name: "escaped backslash", text: `a\\b` + "\n", paths: []string{`a\b`}},
	{name: "trailing backslash", text: `x\` + "\n", paths: []string{`x\`}},
	{name: "backslash slash", text: `x\/` + "\n"},
	{name: "escaped slash", text: `a\/x` + "\n"},
	{name: "escaped bracket open", text: `\[a]` + "\n"},
	{name: "parent excluded", text: "build/\n!build/keep.log\n"},
	{name: "parent excluded by star", text: "*\n!*.log\n"},
	{name: "re-include inside re-included dir", text: "/*\n!/foo\n/foo/*\n!/foo/bar\n"},
	{name: "negated dir", text: "*\n!a/\n"},
	{name: "negated dir and contents", text: "*\n!*/\n!*.log\n"},
	{name: "anchored negation", text: "a/*\n!a/b/\n"},
	{name: "dir only under excluded", text: "a/\n!a/b/\n"},
	{name: "case", text: "A\nabc\n", paths: []string{"ABC"}},
	{name: "node modules", text: "node_modules/\n!node_modules/keep.log\n"},
	{name: "minecraft-like", text: "logs/\ncrash-reports/\n*.jar\n!server.jar\ncache/\nworld/session.lock\n",
		paths: []string{"server.jar", "plugins/x.jar", "crash-reports/c.txt", "world/session.lock", "world/region/r.0.0.mca"}},
}
