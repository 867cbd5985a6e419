package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/kiln.service passes systemd-analyze verify (its ExecStart pointed at
// the kiln binary of these tests), and says what Kiln's processes need:
// the main process alone signalled on stop (a holder and its game outlive
// a restart), the leaf kiln-serve that the runtime leaves a leaf, OOM kills
// of game servers not stopping the unit, and the sandboxing the docs name.
func TestServiceUnit(t *testing.T) {
	unit, err := os.ReadFile("../../docs/kiln.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := unitKeys(t, unit)
	for _, want := range []string{
		"Unit.After=network-online.target docker.service",
		"Service.ExecStart=/usr/local/bin/kiln serve --data-dir /var/lib/kiln",
		"Service.Restart=on-failure",
		"Service.KillMode=process",
		"Service.Delegate=yes",
		"Service.DelegateSubgroup=kiln-serve", // runtime's serveLeaf
		"Service.OOMPolicy=continue",
		"Service.TasksMax=infinity",
		"Service.LimitNOFILE=65536:524288",
		"Service.StateDirectory=kiln",
		"Service.StateDirectoryMode=0711", // secureDataDir's mode with users of their own
		"Service.ProtectSystem=strict",
		"Service.ReadWritePaths=/var/lib/kiln",
		"Service.PrivateTmp=yes",
		"Service.NoNewPrivileges=yes",
		"Service.RestrictSUIDSGID=yes",
	} {
		if !slices.Contains(keys, want) {
			t.Errorf("docs/kiln.service lacks %s", want)
		}
	}
	// Options that would break the process runtime (cgroups, the sandbox's
	// mount namespace, the JVM) must stay out.
	for _, k := range keys {
		for _, bad := range []string{"ProtectControlGroups=", "ProtectKernelTunables=", "RestrictNamespaces=", "MemoryDenyWriteExecute=", "SystemCallFilter=", "PrivateNetwork="} {
			if strings.HasPrefix(k, "Service."+bad) {
				t.Errorf("docs/kiln.service sets %s", k)
			}
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("SKIP: systemd-analyze is not installed (Debian: apt install systemd): %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kiln.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/kiln"), []byte(kilnBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), analyze, "verify", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil || len(out) != 0 {
		t.Errorf("systemd-analyze verify: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	// systemd before 254 does not know DelegateSubgroup and says so; nothing
	// else may be said.
	var want string
	if systemdVersion(t, analyze) < 254 {
		want = path + ":" + strconv.Itoa(lineOf(t, unit, "DelegateSubgroup=")) + ": Unknown key 'DelegateSubgroup' in section [Service], ignoring.\n"
	}
	if stderr.String() != want {
		t.Errorf("systemd-analyze verify said\n%s\nwant\n%s", stderr.String(), want)
	}
}

// unitKeys lists the settings of a unit file as Section.Key=Value.
func unitKeys(t *testing.T, unit []byte) []string {
	t.Helper()
	var keys []string
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			keys = append(keys, section+"."+line)
		}
	}
	return keys
}

// lineOf is the number of the first line of unit starting with prefix.
func lineOf(t *testing.T, unit []byte, prefix string) int {
	t.Helper()
	for i, line := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(line, prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q", prefix)
	return 0
}

// systemdVersion is the version systemd-analyze --version names ("systemd 252 (…)").
func systemdVersion(t *testing.T, analyze string) int {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), analyze, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^systemd (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze --version = %q", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
