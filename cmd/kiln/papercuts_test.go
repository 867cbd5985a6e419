package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// Every command and subcommand answers -h with its synopsis, positional
// arguments included, on stdout and exit status 0.
func TestHelpEverywhere(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "kiln admin token revoke ID"},
		{[]string{"--help"}, "kiln serve [flags]"},
		{[]string{"help"}, "kiln version"},
		{[]string{"serve", "-h"}, "Usage: kiln serve [flags]"},
		{[]string{"serve", "--help"}, "-data-dir"},
		{[]string{"admin", "-h"}, "kiln admin team create NAME"},
		{[]string{"admin", "--help"}, "kiln admin token list --team NAME"},
		{[]string{"admin", "team", "-h"}, "kiln admin team create NAME"},
		{[]string{"admin", "token", "--help"}, "kiln admin token revoke ID"},
		{[]string{"admin", "team", "create", "-h"}, "Usage: kiln admin team create NAME [flags]"},
		{[]string{"admin", "token", "create", "-h"}, "-kind"},
		{[]string{"admin", "token", "list", "--help"}, "Usage: kiln admin token list [flags]"},
		{[]string{"admin", "token", "revoke", "-h"}, "Usage: kiln admin token revoke ID [flags]"},
		{[]string{"admin", "token", "revoke", "tok_x", "--help"}, "Usage: kiln admin token revoke ID [flags]"},
		{[]string{"version", "-h"}, "Usage: kiln version"},
		{[]string{"testserver", "-h"}, "Usage: kiln testserver [flags]"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := kiln(t, c.args...)
			if code != 0 || !strings.Contains(out, c.want) || errOut != "" {
				t.Errorf("kiln %q: exit %d, stdout %q, stderr %q; want exit 0, stdout containing %q, no stderr", c.args, code, out, errOut, c.want)
			}
		})
	}
}

// Mistakes show help on stderr and exit 2.
func TestHelpOnMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"admin", "token", "revoke"}, "kiln admin token revoke ID takes 1 argument(s), got 0"},
		{[]string{"admin", "token", "frob"}, `unknown admin command "token frob"`},
		{[]string{"admin", "token"}, "admin needs a subject and a verb"},
		{[]string{"version", "extra"}, "kiln version takes no arguments"},
		{[]string{"testserver", "--bogus"}, "flag provided but not defined"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := kiln(t, c.args...)
			if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
				t.Errorf("kiln %q: exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr only", c.args, code, out, errOut, c.want)
			}
		})
	}
}

func TestResolveVersion(t *testing.T) {
	stamped := func(v string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/kilnhq/kiln", Version: v}}
	}
	for _, c := range []struct {
		name    string
		ldflags string
		bi      *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"go install module@version", "dev", stamped("v1.2.3"), true, "v1.2.3"},
		{"ldflags wins over a stamp", "v2.0.0", stamped("v0.0.0-20261123000000-abcdef012345+dirty"), true, "v2.0.0"},
		{"ldflags without a stamp", "v2.0.0", stamped("(devel)"), true, "v2.0.0"},
		{"go build without VCS", "dev", stamped("(devel)"), true, "dev"},
		{"no build info", "dev", nil, false, "dev"},
		{"empty ldflags", "", stamped(""), true, "dev"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := resolveVersion(c.ldflags, c.bi, c.ok); got != c.want {
				t.Errorf("resolveVersion(%q, %v) = %q, want %q", c.ldflags, c.bi, got, c.want)
			}
		})
	}
}

func TestVersionLine(t *testing.T) {
	built := func(v string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/kilnhq/kiln", Version: v}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev, at = "0123456789abcdef0123456789abcdef01234567", "2026-11-28T10:20:30Z"
	for _, c := range []struct {
		name    string
		ldflags string
		bi      *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"no build info", "dev", nil, false, "kiln dev"},
		{"no VCS", "dev", built("(devel)", "-trimpath", "true"), true, "kiln dev"},
		{"tagged commit", "dev", built("v0.4.2", "vcs", "git", "vcs.revision", rev, "vcs.time", at, "vcs.modified", "false"), true,
			"kiln v0.4.2 (commit 0123456789ab from 2026-11-28T10:20:30Z)"},
		{"dirty work tree", "dev", built("v0.0.0-20261128102030-0123456789ab+dirty", "vcs.revision", rev, "vcs.time", at, "vcs.modified", "true"), true,
			"kiln v0.0.0-20261128102030-0123456789ab+dirty (commit 0123456789ab+dirty from 2026-11-28T10:20:30Z)"},
		{"ldflags and VCS", "v2.0.0", built("(devel)", "vcs.revision", rev, "vcs.time", at, "vcs.modified", "false"), true,
			"kiln v2.0.0 (commit 0123456789ab from 2026-11-28T10:20:30Z)"},
		{"no time", "dev", built("(devel)", "vcs.revision", "abc123"), true, "kiln dev (commit abc123)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := versionLine(c.ldflags, c.bi, c.ok); got != c.want {
				t.Errorf("versionLine(%q, %v) = %q, want %q", c.ldflags, c.bi, got, c.want)
			}
		})
	}
}

// kiln version and kiln --version print the same: the version the build
// recorded (the -ldflags value, else the module version, else dev) and the
// commit when the build recorded one.
func TestVersion(t *testing.T) {
	bi, err := buildinfo.ReadFile(kilnBin)
	if err != nil {
		t.Fatal(err)
	}
	want := versionLine("dev", bi, true) + "\n"
	for _, arg := range []string{"version", "--version"} {
		if out, errOut, code := kiln(t, arg); code != 0 || out != want || errOut != "" {
			t.Errorf("kiln %s = %q %q exit %d, want %q", arg, out, errOut, code, want)
		}
	}
	// A release build names its version with -ldflags.
	bin := filepath.Join(t.TempDir(), "kiln")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as TestMain: the build cache serves both
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.CommandContext(ctx, bin, arg).Output()
		if err != nil || string(out) != "kiln v9.8.7-test\n" {
			t.Errorf("kiln %s (built with -ldflags) = %q, %v; want \"kiln v9.8.7-test\\n\"", arg, out, err)
		}
	}
}

// A go build in a git work tree records the commit, and kiln version names
// it with the commit's time; the version is the tag at that commit, else
// Go's pseudo-version, and -ldflags wins over both. The module's files
// (what git would list: tracked and untracked, not ignored) are committed
// at a fixed time in a repository of their own, so every line is known.
func TestVersionFromGit(t *testing.T) {
	src := gitCopy(t, "2026-11-28T10:20:30Z")
	rev := strings.TrimSpace(gitIn(t, src, "rev-parse", "HEAD"))[:12]
	const at = "2026-11-28T10:20:30Z"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	out := t.TempDir() // outside src: a binary in the work tree would make it dirty
	versionOf := func(t *testing.T, ldflags string) string {
		t.Helper()
		bin := filepath.Join(out, "kiln")
		// -buildvcs=true: the go command's default (auto) may be set off in
		// GOFLAGS, as on the machines these tests run on; -trimpath as
		// scripts/release builds, so the two share the build cache.
		args := []string{"build", "-buildvcs=true", "-trimpath", "-o", bin}
		if ldflags != "" {
			args = append(args, "-ldflags", ldflags)
		}
		build := exec.CommandContext(ctx, "go", append(args, "./cmd/kiln")...)
		build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		var lines []string
		for _, arg := range []string{"version", "--version"} {
			b, err := exec.CommandContext(ctx, bin, arg).Output()
			if err != nil {
				t.Fatalf("kiln %s: %v", arg, err)
			}
			lines = append(lines, string(b))
		}
		if lines[0] != lines[1] {
			t.Errorf("kiln version = %q, kiln --version = %q; want the same", lines[0], lines[1])
		}
		return lines[0]
	}
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T)
		ldflags string
		want    string
	}{
		{"untagged commit", nil, "",
			"kiln v0.0.0-20261128102030-" + rev + " (commit " + rev + " from " + at + ")\n"},
		{"-ldflags", nil, "-X main.version=v9.8.7",
			"kiln v9.8.7 (commit " + rev + " from " + at + ")\n"},
		{"tagged commit", func(t *testing.T) { gitIn(t, src, "tag", "v0.4.2") }, "",
			"kiln v0.4.2 (commit " + rev + " from " + at + ")\n"},
		{"dirty work tree", func(t *testing.T) {
			f, err := os.OpenFile(filepath.Join(src, "README.md"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("\nAn uncommitted line.\n"); err != nil {
				t.Fatal(err)
			}
		}, "",
			"kiln v0.4.2+dirty (commit " + rev + "+dirty from " + at + ")\n"},
	} {
		// In order: each case keeps what the ones before did to the repository.
		if c.prepare != nil {
			c.prepare(t)
		}
		if got := versionOf(t, c.ldflags); got != c.want {
			t.Errorf("%s: kiln version = %q, want %q", c.name, got, c.want)
		}
	}
}

// gitCopy copies the module's files that git lists (tracked and untracked,
// not ignored: what a go build would see as the work tree) into a new
// repository and commits them at time at. Outside a git work tree (a
// source archive) there is nothing to list, and the test is skipped.
func gitCopy(t *testing.T, at string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.CommandContext(t.Context(), "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Skipf("SKIP: %s is not a git work tree (git ls-files: %v): no commit to record", root, err)
	}
	dst := t.TempDir()
	for name := range strings.SplitSeq(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // tracked, deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dst, "init", "-q", "-b", "main")
	gitIn(t, dst, "add", "-A")
	commit := exec.CommandContext(t.Context(), "git", "commit", "-q", "-m", "kiln at a known time")
	commit.Dir = dst
	commit.Env = append(gitEnv(), "GIT_AUTHOR_DATE="+at, "GIT_COMMITTER_DATE="+at)
	if out, err := commit.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	return dst
}

// gitIn runs git in dir, without the user's or the system's configuration,
// and returns its output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Kiln test", "GIT_AUTHOR_EMAIL=test@kiln.invalid",
		"GIT_COMMITTER_NAME=Kiln test", "GIT_COMMITTER_EMAIL=test@kiln.invalid")
}

// kiln admin run where there is no Kiln database refuses, naming where it
// looked, and creates nothing there.
func TestAdminWithoutDatabase(t *testing.T) {
	t.Run("default data dir", func(t *testing.T) {
		wd := t.TempDir()
		cmd := exec.CommandContext(t.Context(), kilnBin, "admin", "token", "list", "--team", "default")
		cmd.Dir, cmd.Env = wd, cleanEnv()
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		want := "kiln: no Kiln database at " + filepath.Join(wd, "kiln-data", "kiln.db") + "; run kiln serve first or pass --data-dir/--database-url\n"
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 || errb.String() != want || len(out) != 0 {
			t.Errorf("kiln admin in an empty directory: %v, stdout %q, stderr %q; want exit 1 and %q", err, out, errb.String(), want)
		}
		if entries, _ := os.ReadDir(wd); len(entries) != 0 {
			t.Errorf("kiln admin created %v", entries)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		u := storetest.PostgresURL(t)
		_, errOut, code := kiln(t, "admin", "team", "create", "ops", "--database-url", u)
		loc := store.Options{URL: u}.Location()
		if code != 1 || !strings.Contains(errOut, "kiln: no Kiln database at "+loc+"; run kiln serve first") {
			t.Errorf("kiln admin on an empty schema: exit %d, stderr %q", code, errOut)
		}
		if _, err := store.OpenExisting(t.Context(), store.Options{URL: u}); !errors.Is(err, store.ErrNoSchema) {
			t.Errorf("after the refusal, OpenExisting = %v, want the schema still empty (ErrNoSchema)", err)
		}
	})
	t.Run("names the database it opened", func(t *testing.T) {
		dir := t.TempDir()
		p := startServe(t, "--data-dir", dir)
		_, errOut, code := kiln(t, "admin", "token", "list", "--team", "default", "--data-dir", dir)
		if code != 0 || errOut != "kiln: database "+filepath.Join(dir, "kiln.db")+"\n" {
			t.Errorf("kiln admin token list: exit %d, stderr %q; want it to name %s", code, errOut, filepath.Join(dir, "kiln.db"))
		}
		stopClean(t, p)
	})
}
