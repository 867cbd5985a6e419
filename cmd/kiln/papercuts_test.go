package main

import (
	"context"
	"debug/buildinfo"
	"errors"
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

// kiln version and kiln --version print the same: the module version the
// build recorded, else the -ldflags value, else dev.
func TestVersion(t *testing.T) {
	bi, err := buildinfo.ReadFile(kilnBin)
	if err != nil {
		t.Fatal(err)
	}
	want := resolveVersion("dev", bi, true) + "\n"
	for _, arg := range []string{"version", "--version"} {
		if out, errOut, code := kiln(t, arg); code != 0 || out != want || errOut != "" {
			t.Errorf("kiln %s = %q %q exit %d, want %q", arg, out, errOut, code, want)
		}
	}
	// A release build names its version with -ldflags.
	bin := filepath.Join(t.TempDir(), "kiln")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as TestMain: the build cache serves both
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.CommandContext(ctx, bin, arg).Output()
		if err != nil || string(out) != "v9.8.7-test\n" {
			t.Errorf("kiln %s (built with -ldflags) = %q, %v; want v9.8.7-test", arg, out, err)
		}
	}
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
