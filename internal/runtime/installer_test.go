package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// javaFor is the catalog's rule for the versions this test uses
// (network.md §6); the runtime package does not import the catalog.
func javaFor(v string) int {
	switch {
	case strings.HasPrefix(v, "1.12"), strings.HasPrefix(v, "1.7"):
		return 8
	case strings.HasPrefix(v, "1.20.1"):
		return 17
	}
	return 21
}

// TestInstallRunnerProcess runs a stand-in Forge installer (a real jar
// run by a real java) on the process runtime: the Java comes from the
// game version the jar declares, modern and legacy install_profile.json
// alike; a Java 21 installer runs on 25, the lowest newer one here; a
// Java 8 one is refused naming Java 8; Kiln's environment stays out.
func TestInstallRunnerProcess(t *testing.T) {
	j := hostJavas(t)
	t.Setenv("KILN_TEST_SECRET", "must not leak")
	r := &InstallRunner{RT: NewProcess(nil), Javas: j, JavaFor: javaFor}
	argv := []string{"java", "-jar", "kiln-installer.jar", "--installServer"}
	for _, tt := range []struct {
		profile string
		argv    []string
		want    string
	}{
		{`{"spec":0,"profile":"forge","version":"1.20.1-forge-47.3.0","minecraft":"1.20.1"}`, argv, "17 secret=false\n"},
		{`{"spec":1,"profile":"NeoForge","version":"neoforge-21.1.77","minecraft":"1.21.1"}`,
			[]string{"java", "-Djava.net.preferIPv4Stack=true", "-jar", "kiln-installer.jar", "--installServer"}, "25 secret=false\n"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "kiln-installer.jar"), standInInstaller(t, j, tt.profile), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(t.Context(), dir, tt.argv)
		if err != nil {
			t.Fatalf("Run(%s) = %v; output %s", tt.profile, err, out)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "installed-by.txt"))
		if string(got) != tt.want {
			t.Errorf("installed-by.txt = %q, want %q (output %q)", got, tt.want, out)
		}
	}

	// A legacy installer (1.12.2) needs Java 8, which this host lacks.
	dir := t.TempDir()
	legacy := standInInstaller(t, j, `{"install":{"profileName":"forge","target":"1.12.2-forge-14.23.5.2860","minecraft":"1.12.2"},"versionInfo":{}}`)
	os.WriteFile(filepath.Join(dir, "kiln-installer.jar"), legacy, 0o644)
	if _, err := j.Home(8); err == nil {
		t.Skip("this host has Java 8: the refusal cannot be shown")
	}
	_, err := r.Run(t.Context(), dir, argv)
	if !errors.Is(err, ErrNoJava) || !strings.Contains(err.Error(), "the installer for Minecraft 1.12.2: this needs Java 8") {
		t.Errorf("Run(legacy 1.12.2) = %v, want ErrNoJava naming Java 8", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "installed-by.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused installer ran: %v", err)
	}

	// Not an installer: refused before anything runs.
	os.WriteFile(filepath.Join(dir, "kiln-installer.jar"), []byte("not a zip"), 0o644)
	if _, err := r.Run(t.Context(), dir, argv); err == nil || !strings.Contains(err.Error(), "read the installer kiln-installer.jar") {
		t.Errorf("Run(not a jar) = %v", err)
	}
	if _, err := r.Run(t.Context(), dir, []string{"sh", "-c", "true"}); err == nil {
		t.Error("Run(sh) = nil error")
	}
}
