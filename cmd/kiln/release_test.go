package main

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// scripts/release, run on a copy of the module committed at a known time
// with an uncommitted change: it builds the commit (not the change) for
// this machine's architecture, a static ELF (no interpreter, no shared
// library) whose --version names the commit; SHA256SUMS checks it; a
// second run leaves the same bytes and removes what an earlier one left;
// a VERSION argument is the version the binary reports.
func TestRelease(t *testing.T) {
	const at = "2026-11-28T10:20:30Z"
	src := gitCopy(t, at)
	rev := strings.TrimSpace(gitIn(t, src, "rev-parse", "HEAD"))[:12]
	f, err := os.OpenFile(filepath.Join(src, "README.md"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\nAn uncommitted line.\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	arch := runtime.GOARCH
	name := "kiln-linux-" + arch
	bin := filepath.Join(out, name)
	release := func(t *testing.T, args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), filepath.Join(src, "scripts", "release"), append([]string{"--out", out, "--arch", arch}, args...)...)
		cmd.Dir = src
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("scripts/release %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, o.String(), e.String())
		}
		return o.String(), e.String()
	}
	check := func(t *testing.T, version, stdout, stderr string) (sums []byte) {
		t.Helper()
		line := "kiln " + version + " (commit " + rev + " from " + at + ")\n"
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		want := line + fmt.Sprintf("%s  %d bytes, static\n", bin, len(data)) + filepath.Join(out, "SHA256SUMS") + "\n"
		if stdout != want {
			t.Errorf("scripts/release printed\n%s\nwant\n%s", stdout, want)
		}
		if w := "release: building commit " + rev + "; the uncommitted changes of " + src + " are not in it\n"; !strings.Contains(stderr, w) {
			t.Errorf("scripts/release's stderr lacks %q:\n%s", w, stderr)
		}
		entries, err := os.ReadDir(out)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if want := []string{"SHA256SUMS", name}; !slices.Equal(names, want) {
			t.Errorf("files in the output directory: %q, want %q", names, want)
		}
		sums, err = os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x  %s\n", sha256.Sum256(data), name); string(sums) != want {
			t.Errorf("SHA256SUMS = %q, want %q", sums, want)
		}
		checkStatic(t, bin, arch)
		for _, arg := range []string{"--version", "version"} {
			got, err := exec.CommandContext(t.Context(), bin, arg).Output()
			if err != nil || string(got) != line {
				t.Errorf("%s %s = %q, %v; want %q", name, arg, got, err, line)
			}
		}
		return sums
	}

	stdout, stderr := release(t)
	first := check(t, "v0.0.0-20261128102030-"+rev, stdout, stderr)

	// Idempotent: the same bytes again, and nothing left of an earlier run.
	if err := os.WriteFile(filepath.Join(out, "kiln-linux-stale"), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = release(t)
	if second := check(t, "v0.0.0-20261128102030-"+rev, stdout, stderr); !bytes.Equal(second, first) {
		t.Errorf("SHA256SUMS of the second run:\n%s\nof the first:\n%s", second, first)
	}

	stdout, stderr = release(t, "v1.2.3")
	check(t, "v1.2.3", stdout, stderr)
}

// checkStatic fails unless bin is an ELF executable for arch that needs no
// loader (no PT_INTERP) and no shared library.
func checkStatic(t *testing.T, bin, arch string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: machine %v, type %v; want %v, ET_EXEC", bin, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: not static", bin, p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) != 0 {
		t.Errorf("%s needs shared libraries %q (%v)", bin, libs, err)
	}
}
