package install

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/catalog"
)

// fakeJava puts a `java` script first on PATH for the rest of the test. It
// checks it is run as `java -jar <installer> --installServer` in a
// directory holding the installer, then runs body (sh) there.
func fakeJava(t *testing.T, body string) {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
if [ "$1" != "-jar" ] || [ "$3" != "--installServer" ] || [ "$#" -ne 3 ]; then
	echo "fake java: unexpected arguments: $*" >&2
	exit 2
fi
if [ ! -f "$2" ]; then
	echo "fake java: no $2 in $(pwd)" >&2
	exit 3
fi
` + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "java"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestForge(t *testing.T) {
	for _, tt := range []struct {
		name     string
		version  string
		env      map[string]string
		java     string // what the fake installer does
		wantVer  string
		wantFV   string
		wantJava int
		wantJar  string
		wantArgs string
	}{
		{
			name: "modern recommended", version: "1.20.1",
			java:    "mkdir -p libraries/net/minecraftforge/forge/1.20.1-47.3.0 && echo '-p libs' > libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt && echo 'java @user_jvm_args.txt' > run.sh",
			wantVer: "1.20.1", wantFV: "47.3.0", wantJava: 17,
			wantArgs: "libraries/net/minecraftforge/forge/1.20.1-47.3.0/unix_args.txt",
		},
		{
			name: "latest game, legacy jar", version: "latest", env: map[string]string{"FORGE_VERSION": "recommended"},
			java:    "echo jar > forge-1.20.1-47.3.0.jar",
			wantVer: "1.20.1", wantFV: "47.3.0", wantJava: 17, wantJar: "forge-1.20.1-47.3.0.jar",
		},
		{
			name: "old forge pinned", version: "1.16.5", env: map[string]string{"FORGE_VERSION": "36.2.34"},
			java:    "echo jar > forge-1.16.5-36.2.34.jar",
			wantVer: "1.16.5", wantFV: "36.2.34", wantJava: 8, wantJar: "forge-1.16.5-36.2.34.jar",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t)
			fakeJava(t, tt.java)
			i, _ := newInstaller(t, u)
			res, root, err := install(t, i, "forge", tt.version, tt.env)
			if err != nil {
				t.Fatalf("Install: %v", err)
			}
			installer := jar("forge-" + tt.wantVer + "-" + tt.wantFV + "-installer")
			if res.Version != tt.wantVer || res.Build != tt.wantFV || res.JavaMajor != tt.wantJava ||
				res.Jar != tt.wantJar || res.ArgsFile != tt.wantArgs || res.Checksum != "sha1" || res.SHA256 != sha256Hex(installer) {
				t.Errorf("Install = %+v", res)
			}
			if _, err := os.Stat(filepath.Join(root, installerJar)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("installer jar left in root: %v", err)
			}
			if files := rootFiles(t, root); !slices.Contains(files, "eula.txt") {
				t.Errorf("root = %q, want eula.txt", files)
			}
		})
	}
}

func TestForgeSidecarFallback(t *testing.T) {
	u := newUpstream(t)
	fakeJava(t, "echo jar > forge-1.20.1-47.3.0.jar")
	i, _ := newInstaller(t, u)
	if _, _, err := install(t, i, "forge", "1.20.1", nil); err != nil {
		t.Fatal(err)
	}
	// .sha256 answered 404, then .sha1 was used.
	if u.count(forgeJarRoute+".sha256") != 1 || u.count(forgeJarRoute+".sha1") != 1 || u.count(forgeJarRoute+".md5") != 0 {
		t.Errorf("sidecar requests: %v", u.seen())
	}

	// An installer published without any sidecar is refused.
	u2 := newUpstream(t)
	u2.routes[forgeJarRoute+".sha1"] = nil
	i2, _ := newInstaller(t, u2)
	_, root, err := install(t, i2, "forge", "1.20.1", nil)
	if err == nil || !strings.Contains(err.Error(), "publishes no .sha256, .sha1 or .md5") {
		t.Errorf("Install without sidecars = %v", err)
	}
	if files := rootFiles(t, root); len(files) != 0 {
		t.Errorf("root holds %q", files)
	}
}

func TestForgeWrongChecksum(t *testing.T) {
	u := newUpstream(t)
	u.raw(forgeJarRoute+".sha1", "text/plain", []byte(strings.Repeat("ab", 20)))
	fakeJava(t, "echo must not run >&2; exit 9")
	i, cacheDir := newInstaller(t, u)
	_, root, err := install(t, i, "forge", "1.20.1", nil)
	if ce, ok := errors.AsType[*ChecksumError](err); !ok || ce.Algo != "sha1" {
		t.Fatalf("Install = %v, want a sha1 *ChecksumError", err)
	}
	if files := append(rootFiles(t, root), rootFiles(t, cacheDir)...); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
}

func TestForgeNoJava(t *testing.T) {
	u := newUpstream(t)
	t.Setenv("PATH", t.TempDir())
	i, _ := newInstaller(t, u)
	_, _, err := install(t, i, "forge", "1.20.1", nil)
	if !errors.Is(err, ErrNoJava) || !strings.Contains(err.Error(), "forge installer needs java on the host") {
		t.Fatalf("Install without java = %v, want ErrNoJava", err)
	}
	if n := u.count(forgeJarRoute); n != 0 {
		t.Errorf("installer downloaded %d times before finding there is no java", n)
	}
}

func TestForgeInstallerFails(t *testing.T) {
	u := newUpstream(t)
	fakeJava(t, "echo 'Downloading libraries'; echo 'Exception: could not reach maven' >&2; exit 1")
	i, _ := newInstaller(t, u)
	_, root, err := install(t, i, "forge", "1.20.1", nil)
	if err == nil || !strings.Contains(err.Error(), "could not reach maven") {
		t.Fatalf("Install = %v, want the installer's output in the error", err)
	}
	if files := rootFiles(t, root); len(files) != 0 {
		t.Errorf("root holds %q", files)
	}
}

func TestNeoForge(t *testing.T) {
	for _, tt := range []struct {
		name    string
		version string
		env     map[string]string
		wantMC  string
		wantNV  string
	}{
		{"latest skips betas", "latest", nil, "1.21.1", "21.1.77"},
		{"game version", "1.21.1", nil, "1.21.1", "21.1.77"},
		{"pinned", "1.21.1", map[string]string{"NEOFORGE_VERSION": "21.1.76"}, "1.21.1", "21.1.76"},
		{"pinned with latest game", "latest", map[string]string{"NEOFORGE_VERSION": "20.4.237"}, "1.20.4", "20.4.237"},
		{"only a beta", "1.21.4", nil, "1.21.4", "21.4.1-beta"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t)
			content := jar("neoforge-" + tt.wantNV + "-installer")
			route := "maven.neoforged.net/releases/net/neoforged/neoforge/" + tt.wantNV + "/neoforge-" + tt.wantNV + "-installer.jar"
			u.raw(route, "application/java-archive", content)
			u.raw(route+".sha256", "text/plain", []byte(sha256Hex(content)))
			args := "libraries/net/neoforged/neoforge/" + tt.wantNV + "/unix_args.txt"
			fakeJava(t, "mkdir -p $(dirname "+args+") && echo args > "+args)
			i, _ := newInstaller(t, u)
			res, _, err := install(t, i, "neoforge", tt.version, tt.env)
			if err != nil {
				t.Fatalf("Install: %v", err)
			}
			want := catalog.Result{Version: tt.wantMC, Build: tt.wantNV, JavaMajor: profile(t, "neoforge").JavaFor(tt.wantMC),
				ArgsFile: args, SHA256: sha256Hex(content), Source: "https://" + route, Checksum: "sha256"}
			if res != want {
				t.Errorf("Install\n got %+v\nwant %+v", res, want)
			}
		})
	}
}

// TestInstallerEnvironment checks the installer does not inherit Kiln's
// environment.
func TestInstallerEnvironment(t *testing.T) {
	u := newUpstream(t)
	t.Setenv("KILN_DATABASE_URL", "postgres://secret")
	fakeJava(t, `env > env.txt; echo jar > forge-1.20.1-47.3.0.jar`)
	i, _ := newInstaller(t, u)
	_, root, err := install(t, i, "forge", "1.20.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(root, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "secret") || !strings.Contains(string(env), "HOME="+root) {
		t.Errorf("installer environment:\n%s", env)
	}
}
