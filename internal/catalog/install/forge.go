package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

// Forge and NeoForge upstreams.
const (
	forgePromotions = "https://files.minecraftforge.net/net/minecraftforge/forge/promotions_slim.json"
	forgeMaven      = "https://maven.minecraftforge.net/net/minecraftforge/forge/"
	neoVersions     = "https://maven.neoforged.net/api/maven/versions/releases/net/neoforged/neoforge"
	neoMaven        = "https://maven.neoforged.net/releases/net/neoforged/neoforge/"
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

// forge installs Forge: the game version ("latest" = the newest one with a
// promotion), FORGE_VERSION "recommended" (falling back to the latest
// promotion when none is recommended), "latest" or an explicit version.
func (i *Installer) forge(ctx context.Context, j job) (catalog.Result, error) {
	var promos struct {
		Promos map[string]string `json:"promos"`
	}
	if err := i.fetch.json(ctx, forgePromotions, &promos); err != nil {
		return catalog.Result{}, err
	}
	mc := j.version
	if mc == "latest" {
		for key := range promos.Promos {
			if v, ok := strings.CutSuffix(key, "-latest"); ok && (mc == "latest" || compareVersions(v, mc) > 0) {
				mc = v
			}
		}
		if mc == "latest" {
			return catalog.Result{}, notFound("forge lists no promoted version")
		}
	}
	fv := j.setting("FORGE_VERSION")
	switch fv {
	case "recommended", "latest":
		v, ok := promos.Promos[mc+"-"+fv]
		if !ok && fv == "recommended" {
			v, ok = promos.Promos[mc+"-latest"]
		}
		if !ok {
			return catalog.Result{}, notFound("forge has no promoted version for minecraft %s (set FORGE_VERSION to pin one)", mc)
		}
		fv = v
	}
	full := mc + "-" + fv
	if !validToken(full) {
		return catalog.Result{}, validate.Errorf("env.FORGE_VERSION", "%q is not a forge version", fv)
	}
	src := forgeMaven + url.PathEscape(full) + "/forge-" + url.PathEscape(full) + "-installer.jar"
	res, err := i.runInstaller(ctx, j, src, "forge")
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = mc, fv, j.p.JavaFor(mc)
	args := "libraries/net/minecraftforge/forge/" + full + "/unix_args.txt"
	jars := []string{"forge-" + full + ".jar", "forge-" + full + "-universal.jar", "forge-" + full + "-shim.jar"}
	if err := i.launchTarget(j, &res, args, jars); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// neoforge installs NeoForge. Its versions encode the game version: 21.1.x
// is for 1.21.1, 21.0.x for 1.21, 20.4.x for 1.20.4; year-based game
// versions (26.1 …) are expected to map to 26.1.x.y (verify when they
// ship). "latest" is the newest stable (non-beta) version; for a game
// version, NEOFORGE_VERSION "latest" is its newest stable version, or its
// newest beta when it has no stable one.
func (i *Installer) neoforge(ctx context.Context, j job) (catalog.Result, error) {
	var list struct {
		Versions []string `json:"versions"`
	}
	if err := i.fetch.json(ctx, neoVersions, &list); err != nil {
		return catalog.Result{}, err
	}
	versions := slices.Clone(list.Versions)
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(b, a) }) // newest first
	stable := func(v string) bool { return !strings.Contains(v, "-") }

	nv := j.setting("NEOFORGE_VERSION")
	mc := j.version
	switch {
	case nv != "latest":
		if !slices.Contains(versions, nv) {
			return catalog.Result{}, notFound("neoforge has no version %s", nv)
		}
		if mc != "latest" && neoGameVersion(nv) != mc {
			return catalog.Result{}, notFound("neoforge %s is for minecraft %s, not %s", nv, neoGameVersion(nv), mc)
		}
	case mc == "latest":
		for _, v := range versions {
			if stable(v) {
				nv = v
				break
			}
		}
		if nv == "latest" {
			return catalog.Result{}, notFound("neoforge lists no stable version")
		}
	default:
		var beta string
		for _, v := range versions {
			if neoGameVersion(v) != mc {
				continue
			}
			if stable(v) {
				nv = v
				break
			}
			if beta == "" {
				beta = v
			}
		}
		if nv == "latest" {
			nv = beta
		}
		if nv == "" {
			return catalog.Result{}, notFound("neoforge has no version for minecraft %s", mc)
		}
	}
	mc = neoGameVersion(nv)
	if !validToken(nv) {
		return catalog.Result{}, fmt.Errorf("neoforge version %q from upstream is not a version", nv)
	}
	src := neoMaven + nv + "/neoforge-" + nv + "-installer.jar"
	res, err := i.runInstaller(ctx, j, src, "neoforge")
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = mc, nv, j.p.JavaFor(mc)
	if err := i.launchTarget(j, &res, "libraries/net/neoforged/neoforge/"+nv+"/unix_args.txt", nil); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// neoGameVersion maps a NeoForge version to its game version.
func neoGameVersion(nv string) string {
	n, _ := splitVersion(nv)
	switch {
	case len(n) < 2:
		return ""
	case n[0] >= 26: // year-based: 26.1.0.x → 26.1, 26.1.1.x → 26.1.1
		if len(n) >= 4 && n[2] != 0 {
			return fmt.Sprintf("%d.%d.%d", n[0], n[1], n[2])
		}
		return fmt.Sprintf("%d.%d", n[0], n[1])
	case n[1] == 0:
		return fmt.Sprintf("1.%d", n[0])
	default:
		return fmt.Sprintf("1.%d.%d", n[0], n[1])
	}
}

// runInstaller downloads an installer jar, verified against its Maven
// checksum sidecar, into the root and runs `java -jar <jar>
// --installServer` there. The installer jar is removed afterwards. The
// upstream installer downloads the game jar and libraries itself; the
// mirror does not cover those requests.
func (i *Installer) runInstaller(ctx context.Context, j job, src, what string) (catalog.Result, error) {
	if i.hostJava {
		if _, err := exec.LookPath("java"); err != nil {
			return catalog.Result{}, fmt.Errorf("%s installer needs java on the host (none on PATH; install a JRE): %w", what, ErrNoJava)
		}
	}
	algo, sum, err := i.sidecar(ctx, src)
	if err != nil {
		return catalog.Result{}, err
	}
	sha, err := i.artifactInto(ctx, j, artifact{URL: src, Sums: map[string]string{algo: sum}}, installerJar)
	if err != nil {
		return catalog.Result{}, err
	}
	defer func() { _ = j.root.Remove(installerJar) }()

	rctx, cancel := context.WithTimeout(ctx, i.runTimeout)
	defer cancel()
	i.log.InfoContext(ctx, "running installer", "software", j.p.Type, "url", src)
	out, err := i.runner.Run(rctx, j.rootDir, []string{"java", "-jar", installerJar, "--installServer"})
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

// sidecar fetches the checksum Maven publishes next to an artifact, trying
// the strongest first: .sha256, .sha1, .md5. When none exists it asks for
// the artifact itself (HEAD) to tell a missing version (ErrVersionNotFound)
// from an artifact published without a checksum, which is refused.
func (i *Installer) sidecar(ctx context.Context, src string) (algo, sum string, err error) {
	for _, a := range []struct {
		algo string
		n    int
	}{{"sha256", 64}, {"sha1", 40}, {"md5", 32}} {
		body, err := i.fetch.bytes(ctx, src+"."+a.algo)
		if isStatus(err, http.StatusNotFound) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		// A sidecar is the hex digest, sometimes followed by a file name.
		f := strings.Fields(string(body))
		if len(f) == 0 || !isHex(strings.ToLower(f[0]), a.n) {
			return "", "", fmt.Errorf("%s.%s is not a %s checksum", src, a.algo, a.algo)
		}
		return a.algo, strings.ToLower(f[0]), nil
	}
	hctx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	resp, err := i.fetch.do(hctx, http.MethodHead, src)
	if isStatus(err, http.StatusNotFound) {
		return "", "", fmt.Errorf("%s: %w (%w)", src, ErrVersionNotFound, err)
	}
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	return "", "", fmt.Errorf("%s: upstream publishes no .sha256, .sha1 or .md5 checksum; refusing an unverifiable installer", src)
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
