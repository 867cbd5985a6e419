package runtime

import (
	"archive/zip"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeHome makes a Java home under dir/name: an executable bin/java and a
// release file saying version.
func fakeHome(t *testing.T, dir, name, version string) string {
	t.Helper()
	home := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "bin", "java"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if version != "" {
		rel := "IMPLEMENTOR=\"Test\"\nJAVA_VERSION=\"" + version + "\"\n"
		if err := os.WriteFile(filepath.Join(home, "release"), []byte(rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

func TestJavas(t *testing.T) {
	dir := t.TempDir()
	j8 := fakeHome(t, dir, "java-8", "1.8.0_392")
	j17 := fakeHome(t, dir, "java-17", "17.0.15")
	j25 := fakeHome(t, dir, "temurin-25", "25.0.3")
	fakeHome(t, dir, "no-release", "")
	if err := os.Symlink(j17, filepath.Join(dir, "java-1.17.0")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "not-a-jdk"), 0o755)

	found := DiscoverJava([]string{dir, filepath.Join(dir, "missing")}, false)
	if want := map[int]string{8: j8, 17: j17, 25: j25}; len(found) != 3 || found[8] != j8 || found[17] != j17 || found[25] != j25 {
		t.Fatalf("DiscoverJava = %v, want %v", found, want)
	}

	explicit := fakeHome(t, t.TempDir(), "my-21", "21.0.5")
	j, err := NewJavas(map[int]string{21: explicit}, []string{dir}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Majors(); !slices.Equal(got, []int{8, 17, 21, 25}) {
		t.Errorf("Majors = %v", got)
	}
	for major, want := range map[int]string{8: j8, 16: j17, 17: j17, 18: explicit, 21: explicit, 22: j25, 25: j25} {
		if got, err := j.Home(major); err != nil || got != want {
			t.Errorf("Home(%d) = %q, %v; want %q", major, got, err, want)
		}
	}
	if bin, _ := j.Binary(17); bin != filepath.Join(j17, "bin", "java") {
		t.Errorf("Binary(17) = %q", bin)
	}
	_, err = j.Home(26)
	if !errors.Is(err, ErrNoJava) || !strings.Contains(err.Error(), "this needs Java 26 or newer, and the host has 8, 17, 21, 25") ||
		!strings.Contains(err.Error(), "--java-home 26=<its JAVA_HOME>") {
		t.Errorf("Home(26) = %v", err)
	}
	// Java 8 is never replaced by a newer one.
	only17, _ := NewJavas(map[int]string{17: j17}, nil, false)
	_, err = only17.Home(8)
	if !errors.Is(err, ErrNoJava) || !strings.Contains(err.Error(), "this needs Java 8 (a newer one is not used: Minecraft 1.16.5 and older, and their Forge, need Java 8), and the host has 17") {
		t.Errorf("Home(8) with only 17 = %v", err)
	}

	// An explicit home is checked.
	if _, err := NewJavas(map[int]string{17: t.TempDir()}, nil, false); err == nil || !strings.Contains(err.Error(), "no executable bin/java") {
		t.Errorf("NewJavas(no java) = %v", err)
	}
	if _, err := NewJavas(map[int]string{11: j17}, nil, false); err == nil || !strings.Contains(err.Error(), "its release file says Java 17") {
		t.Errorf("NewJavas(wrong major) = %v", err)
	}
}

// hostJavas are this machine's Java 17 and 25 (the test image has them);
// the test is skipped on a machine without them.
func hostJavas(t *testing.T) *Javas {
	t.Helper()
	j, err := NewJavas(nil, JavaDirs, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Home(17); err != nil {
		t.Skipf("no Java 17 on this host: %v", err)
	}
	if h, _ := j.Home(25); h == "" || !strings.Contains(h, "25") {
		t.Skip("no Java 25 on this host")
	}
	if _, err := exec.LookPath(filepath.Join(j.homes[17], "bin", "javac")); err != nil {
		t.Skip("no javac to build the stand-in installer")
	}
	return j
}

// standInInstaller builds, with the host's javac, a jar that behaves as
// a Forge installer run with --installServer: its install_profile.json
// names profile (the game version), and it writes installed-by.txt with
// the Java specification version it ran on and whether it could see
// KILN_TEST_SECRET in its environment.
func standInInstaller(t *testing.T, j *Javas, profile string) []byte {
	t.Helper()
	src := t.TempDir()
	java := `import java.nio.file.*;
public class Installer {
  public static void main(String[] a) throws Exception {
    if (a.length != 1 || !a[0].equals("--installServer")) { System.err.println("usage: --installServer"); System.exit(2); }
    String out = System.getProperty("java.specification.version") + " secret=" + (System.getenv("KILN_TEST_SECRET") != null) + "\n";
    Files.write(Paths.get("installed-by.txt"), out.getBytes("UTF-8"));
    System.out.println("installed on java " + System.getProperty("java.specification.version"));
  }
}
`
	if err := os.WriteFile(filepath.Join(src, "Installer.java"), []byte(java), 0o644); err != nil {
		t.Fatal(err)
	}
	javac := exec.Command(filepath.Join(j.homes[17], "bin", "javac"), "--release", "8", "-d", src, filepath.Join(src, "Installer.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	class, err := os.ReadFile(filepath.Join(src, "Installer.class"))
	if err != nil {
		t.Fatal(err)
	}
	jar := filepath.Join(src, "installer.jar")
	f, err := os.Create(jar)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, data := range map[string][]byte{
		"META-INF/MANIFEST.MF": []byte("Manifest-Version: 1.0\r\nMain-Class: Installer\r\n\r\n"),
		"Installer.class":      class,
		"install_profile.json": []byte(profile),
	} {
		w, _ := zw.Create(name)
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, err := os.ReadFile(jar)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
