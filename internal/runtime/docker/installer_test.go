package docker

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/runtime"
)

// TestInstallRunnerDocker runs a Forge installer as the docker runtime
// does: in a container of the image for the Java its game version needs,
// the server root mounted, as the containers' user, and the container
// removed afterwards. No Java image can be pulled here, so the images are
// built FROM scratch around a static stand-in for java
// (testdata/fakejava), one per Java major, each saying which it is.
func TestInstallRunnerDocker(t *testing.T) {
	s := newSuite(t)
	images := map[int]string{}
	exe := buildStatic(t, "./testdata/fakejava")
	for _, major := range []int{17, 21} {
		images[major] = buildJavaImage(t, s.d.cli, exe, major)
	}
	r := &runtime.InstallRunner{RT: s.d, MemoryMB: 256,
		JavaFor: func(v string) int {
			if strings.HasPrefix(v, "1.20.1") {
				return 17
			}
			return 21
		},
		Image: func(major int) string { return images[major] }}
	argv := []string{"java", "-jar", "kiln-installer.jar", "--installServer"}
	root := func(profile string) string {
		dir := t.TempDir()
		if os.Getuid() == 0 {
			if err := os.Chown(dir, s.uid, s.gid); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("install_profile.json")
		w.Write([]byte(profile))
		zw.Close()
		if err := os.WriteFile(filepath.Join(dir, "kiln-installer.jar"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tt := range []struct {
		profile, want string
	}{
		{`{"minecraft":"1.20.1","version":"1.20.1-forge-47.3.0"}`, "java 17"},
		{`{"minecraft":"1.21.1","version":"neoforge-21.1.77"}`, "java 21"},
	} {
		dir := root(tt.profile)
		out, err := r.Run(t.Context(), dir, argv)
		if err != nil {
			t.Fatalf("Run(%s) = %v; output %q", tt.profile, err, out)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "installed-by.txt"))
		var v struct{ Version string }
		json.Unmarshal([]byte(tt.profile), &v)
		if want := tt.want + " uid=" + strconv.Itoa(s.uid) + " " + v.Version + "\n"; string(got) != want {
			t.Errorf("installed-by.txt = %q, want %q", got, want)
		}
		if !strings.Contains(string(out), "installed\n") {
			t.Errorf("output = %q, want the installer's lines", out)
		}
	}
	dir := root(`{"minecraft":"1.21.4","version":"fail"}`)
	out, err := r.Run(t.Context(), dir, argv)
	if err == nil || err.Error() != "exit code 3" || !strings.Contains(string(out), "the installer failed on purpose") {
		t.Errorf("Run(failing installer) = %v, output %q; want exit code 3 and its stderr", err, out)
	}
	// No container is left behind.
	list, err := s.d.cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelManaged+"=true")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		if strings.HasPrefix(c.Labels[LabelServer], "install-") {
			t.Errorf("installer container %s (%s) left behind", c.ID, c.Labels[LabelServer])
		}
	}
}

// buildStatic compiles a test program as a static linux binary.
func buildStatic(t *testing.T, pkg string) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prog")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// buildJavaImage builds an image FROM scratch with exe as /usr/bin/java
// and /java-major saying major; it is removed when the test ends.
func buildJavaImage(t *testing.T, cli *client.Client, exe []byte, major int) string {
	t.Helper()
	return buildTestImage(t, cli, "kiln-docker-test-java:"+randomHex(6)+"-"+strconv.Itoa(major), []imageFile{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY java /usr/bin/java\nCOPY java-major /java-major\n")},
		{"java", 0o755, exe},
		{"java-major", 0o644, []byte(strconv.Itoa(major) + "\n")},
	})
}

// TestRemoveEndedInstallers: installer containers a killed kiln left are
// removed at the next start once they have ended; a running one (another
// kiln's, or one still finishing) is left alone.
func TestRemoveEndedInstallers(t *testing.T) {
	s := newSuite(t)
	start := func() (runtime.Spec, runtime.Instance) {
		spec := s.spec(t)
		spec.ServerID = "install-" + randomHex(6)
		spec.Port = 0
		inst, err := s.d.Start(t.Context(), spec, func(string) {})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		return spec, inst
	}
	ended, endedInst := start()
	running, runningInst := start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = s.d.Remove(ctx, ended.ServerID)
		_ = s.d.Remove(ctx, running.ServerID)
	})
	if err := endedInst.WriteLine("exit 0"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-endedInst.Done():
	case <-time.After(waitLimit):
		t.Fatal("the installer stand-in did not end")
	}
	n, err := s.d.RemoveEndedInstallers(t.Context())
	if err != nil || n < 1 {
		t.Fatalf("RemoveEndedInstallers = %d, %v; want at least the ended one", n, err)
	}
	if _, err := s.d.cli.ContainerInspect(t.Context(), endedInst.Ref(), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("ended installer container: inspect = %v, want not found", err)
	}
	res, err := s.d.cli.ContainerInspect(t.Context(), runningInst.Ref(), client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil || !res.Container.State.Running {
		t.Errorf("running installer container: %v; want it left running", err)
	}
}
