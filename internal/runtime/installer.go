package runtime

import (
	"archive/zip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// InstallRunner runs the Forge and NeoForge installers (it implements the
// Runner of internal/catalog/install) with the Java the installer's game
// version needs, the same rule as the server's: on the process runtime
// the java of that major found on the host (Javas), in a container of
// the image for that major on any other runtime (Image), so the
// installer runs where and as the server will.
//
// The game version is read from the installer jar itself
// (install_profile.json: "minecraft" on modern installers,
// install.minecraft on the legacy ones of 1.7.10–1.12.2), never guessed.
type InstallRunner struct {
	RT Runtime
	// Javas are the host's Java installations (process runtime).
	Javas *Javas
	// Image returns the container image for a Java major (docker).
	Image func(major int) string
	// JavaFor maps a game version to its Java major (catalog.Profile.JavaFor).
	JavaFor func(gameVersion string) int
	// MemoryMB bounds an installer container; 0 means 2048.
	MemoryMB int
}

// maxInstallerOutput is how much of an installer's output Run returns.
const maxInstallerOutput = 16 << 10

// Run runs argv (`java [options] -jar <installer> --installServer`) in dir with the
// Java of the installer's game version: argv[0] "java" is replaced by the
// host's java of that major, or runs inside that major's image. It returns
// the tail of the output and an error for a failure to run or a non-zero
// exit; ErrNoJava (wrapped, naming the major) when the host lacks it.
func (r *InstallRunner) Run(ctx context.Context, dir string, argv []string) ([]byte, error) {
	jar := slices.Index(argv, "-jar") + 1
	if len(argv) == 0 || argv[0] != "java" || jar == 0 || jar >= len(argv) {
		return nil, fmt.Errorf("installer runner: %q is not java [options] -jar <installer> …", argv)
	}
	mc, err := installerGameVersion(filepath.Join(dir, argv[jar]))
	if err != nil {
		return nil, err
	}
	major := r.JavaFor(mc)
	if r.RT == nil || r.RT.Name() == "process" {
		home, err := r.Javas.Home(major)
		if err != nil {
			return nil, fmt.Errorf("the installer for Minecraft %s: %w", mc, err)
		}
		return runHost(ctx, dir, home, append([]string{filepath.Join(home, "bin", "java")}, argv[1:]...))
	}
	return r.runContainer(ctx, dir, r.Image(major), argv)
}

// installerGameVersion reads the game version an installer jar installs.
func installerGameVersion(jar string) (string, error) {
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return "", fmt.Errorf("read the installer %s: %w", filepath.Base(jar), err)
	}
	defer zr.Close()
	f, err := zr.Open("install_profile.json")
	if err != nil {
		return "", fmt.Errorf("the installer %s has no install_profile.json: %w", filepath.Base(jar), err)
	}
	defer f.Close()
	var prof struct {
		Minecraft string `json:"minecraft"`
		Install   struct {
			Minecraft string `json:"minecraft"`
		} `json:"install"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&prof); err != nil {
		return "", fmt.Errorf("the installer's install_profile.json: %w", err)
	}
	mc := prof.Minecraft
	if mc == "" {
		mc = prof.Install.Minecraft
	}
	if mc == "" || len(mc) > 64 {
		return "", errors.New("the installer's install_profile.json names no Minecraft version")
	}
	return mc, nil
}

// runHost runs argv on this host in dir with a minimal environment
// (PATH, JAVA_HOME of the chosen Java, proxy settings, HOME = dir), never
// Kiln's own: the installer is upstream code and must not see database
// URLs or API keys.
func runHost(ctx context.Context, dir, javaHome string, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "LANG=C.UTF-8", "JAVA_HOME=" + javaHome}
	for _, k := range []string{"PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.WaitDelay = 10 * time.Second
	out := &tail{max: maxInstallerOutput}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	return out.bytes(), err
}

// runContainer runs argv in a container of image with dir mounted as the
// server root would be (the runtime's limits and hardening apply; no port
// is published), waits for it to end and removes it.
func (r *InstallRunner) runContainer(ctx context.Context, dir, image string, argv []string) ([]byte, error) {
	mem := r.MemoryMB
	if mem == 0 {
		mem = 2048
	}
	id := "install-" + strings.ToLower(rand.Text()[:16])
	out := &tail{max: maxInstallerOutput}
	inst, err := r.RT.Start(ctx, Spec{ServerID: id, Root: dir, Image: image, Argv: argv,
		Env: []string{"HOME=/tmp", "LANG=C.UTF-8"}, MemoryMB: mem},
		func(line string) { out.Write([]byte(line + "\n")) })
	if err != nil {
		return nil, fmt.Errorf("run the installer in %s: %w", image, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.RT.Remove(rctx, id)
	}()
	select {
	case <-inst.Done():
	case <-ctx.Done():
		_ = inst.Kill()
		<-inst.Done()
		return out.bytes(), ctx.Err()
	}
	switch e := inst.Exit(); {
	case e.Err != nil:
		return out.bytes(), e.Err
	case e.Signal != "":
		return out.bytes(), fmt.Errorf("killed by %s", e.Signal)
	case e.Code != 0:
		return out.bytes(), fmt.Errorf("exit code %d", e.Code)
	}
	return out.bytes(), nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}
