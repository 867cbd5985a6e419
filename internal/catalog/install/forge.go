package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// installerJar is the name the Forge/NeoForge installer has in the root
// while it runs; it is removed afterwards.
const installerJar = "kiln-installer.jar"

// Runner runs a program to completion in a directory and returns its
// output (stdout and stderr, possibly only the tail). The Forge and
// NeoForge installers use it to run `java -jar … --installServer`. It is a
// seam for running the installer elsewhere than on this host (in a
// container, on an agent); the default runs it here with os/exec.
type Runner interface {
	Run(ctx context.Context, dir string, argv []string) ([]byte, error)
}

// execRunner runs programs on this host. The program gets a minimal
// environment (PATH, JAVA_HOME, proxy settings, HOME = dir), never Kiln's
// own: the installer is upstream code and must not see database URLs or
// API keys.
type execRunner struct{}

func (execRunner) Run(ctx context.Context, dir string, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "LANG=C.UTF-8"}
	for _, k := range []string{"PATH", "JAVA_HOME", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.WaitDelay = 10 * time.Second
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	return out.buf, err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// forge installs Forge (upstream.Forge says which game and Forge version,
// from FORGE_VERSION): it runs the installer and finds what it left to
// start.
func (i *Installer) forge(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.Forge(ctx, &i.fetch, j.version, j.setting("FORGE_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	mc, fv, full := rel.Game, rel.Version, rel.Coordinate
	libs := "libraries/net/minecraftforge/forge"
	res, err := i.runInstaller(ctx, j, rel.Installer, "forge", libs)
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = mc, fv, j.p.JavaFor(mc)
	// 1.17+ leaves an args file (1.20.3+ also a -shim.jar, which run.sh
	// only uses to check the Java version); 1.12.2 from 14.23.5.2851 on a
	// forge-<full>.jar; older ones forge-<full>-universal.jar.
	args := libs + "/" + full + "/unix_args.txt"
	jars := []string{"forge-" + full + ".jar", "forge-" + full + "-universal.jar", "forge-" + full + "-shim.jar"}
	if err := i.launchTarget(j, &res, args, jars); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// neoforge installs NeoForge (upstream.NeoForge says which version, from
// NEOFORGE_VERSION; for 1.20.1 net.neoforged:forge): it runs the
// installer and takes the args file it leaves.
func (i *Installer) neoforge(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.NeoForge(ctx, &i.fetch, j.version, j.setting("NEOFORGE_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	libs := "libraries/net/neoforged/" + rel.ArtifactID
	res, err := i.runInstaller(ctx, j, rel.Installer, "neoforge", libs)
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = rel.Game, rel.Version, j.p.JavaFor(rel.Game)
	if err := i.launchTarget(j, &res, libs+"/"+rel.Coordinate+"/unix_args.txt", nil); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// runInstaller downloads an installer jar, verified against its Maven
// checksum sidecar, into the root, removes the libraries tree of a
// previous install (libs, relative to the root; see cleanLibraries) and
// runs `java -jar <jar> --installServer` (or `java -jar <jar> args…`) there. The installer jar is
// removed afterwards. The
// upstream installer downloads the game jar and libraries itself; the
// mirror does not cover those requests.
func (i *Installer) runInstaller(ctx context.Context, j job, inst upstream.Artifact, what, libs string, args ...string) (catalog.Result, error) {
	if len(args) == 0 {
		args = []string{"--installServer"}
	}
	if i.hostJava {
		if _, err := exec.LookPath("java"); err != nil {
			return catalog.Result{}, fmt.Errorf("%s installer needs java on the host (none on PATH; install a JRE): %w", what, ErrNoJava)
		}
	}
	src, algo := inst.URL, inst.Strongest()
	sha, err := i.artifactInto(ctx, j, inst, installerJar)
	if err != nil {
		return catalog.Result{}, err
	}
	defer func() { _ = j.root.Remove(installerJar) }()
	if libs != "" {
		if err := cleanLibraries(j, libs); err != nil {
			return catalog.Result{}, err
		}
	}

	rctx, cancel := context.WithTimeout(ctx, i.runTimeout)
	defer cancel()
	i.log.InfoContext(ctx, "running installer", "software", j.p.Type, "url", src)
	out, err := i.runner.Run(rctx, j.rootDir, append([]string{"java", "-jar", installerJar}, args...))
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return catalog.Result{}, fmt.Errorf("%s installer needs java on the host: %w", what, ErrNoJava)
		}
		if ctx.Err() != nil {
			return catalog.Result{}, ctx.Err()
		}
		return catalog.Result{}, fmt.Errorf("%s installer failed: %w; output ends: %s", what, err, lastLines(out, 5))
	}
	return catalog.Result{SHA256: sha, Source: src, Checksum: algo}, nil
}

// cleanLibraries removes dir (a libraries tree such as
// libraries/net/minecraftforge/forge) from the root before an installer
// runs, so the files of two versions never mix: Forge and NeoForge keep
// one directory per version there, and an args file or a library left by
// the old one could be picked up by the new one. It goes through os.Root:
// a symlink on the way that leads out of the root is refused, and a
// symlink at dir itself is removed, never followed.
func cleanLibraries(j job, dir string) error {
	if err := j.root.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the previous install's %s: %w", dir, err)
	}
	return nil
}

// launchTarget finds what the installer left to start: the JVM args file
// (1.17+) or, for older Forge, a server jar.
func (i *Installer) launchTarget(j job, res *catalog.Result, argsFile string, jars []string) error {
	if _, err := j.root.Stat(argsFile); err == nil {
		res.ArgsFile = argsFile
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, jar := range jars {
		if _, err := j.root.Stat(jar); err == nil {
			res.Jar = jar
			return nil
		}
	}
	return fmt.Errorf("the installer finished but left neither %s nor a server jar", argsFile)
}

func lastLines(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.ToValidUTF8(string(bytes.Join(lines, []byte(" | "))), "")
}
