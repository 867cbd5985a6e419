package install

import (
	"bytes"
	"context"
	"encoding/xml"
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
	neoMaven        = "https://maven.neoforged.net/releases/net/neoforged/neoforge/"
	// NeoForge for 1.20.1 is a fork of Forge 47.1 published under Forge's
	// coordinates in NeoForge's group: net.neoforged:forge 1.20.1-47.1.x.
	neoForgeMaven = "https://maven.neoforged.net/releases/net/neoforged/forge/"
	neoForgeGame  = "1.20.1"
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
	if !validToken(mc + "-" + fv) {
		return catalog.Result{}, validate.Errorf("env.FORGE_VERSION", "%q is not a forge version", fv)
	}
	// Every few major versions Forge changed how it names its Maven
	// versions: 1.7.10 and 1.8.9 builds carry the game version again
	// (1.7.10-10.13.4.1614-1.7.10), some 1.7.2 ones "-mc172". Each name is
	// tried in this order, as itzg/mc-image-helper's ForgeInstallerResolver
	// does; the first with a published installer wins.
	var (
		full string
		inst installerRef
	)
	for _, name := range []string{mc + "-" + fv, mc + "-" + fv + "-" + mc, mc + "-" + fv + "-mc172"} {
		src := forgeMaven + url.PathEscape(name) + "/forge-" + url.PathEscape(name) + "-installer.jar"
		ref, err := i.mavenInstaller(ctx, src)
		if errors.Is(err, ErrVersionNotFound) {
			continue
		}
		if err != nil {
			return catalog.Result{}, err
		}
		full, inst = name, ref
		break
	}
	if full == "" {
		return catalog.Result{}, notFound("forge has no installer for minecraft %s forge %s", mc, fv)
	}
	libs := "libraries/net/minecraftforge/forge"
	res, err := i.runInstaller(ctx, j, inst, "forge", libs)
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

// neoforge installs NeoForge from its Maven's maven-metadata.xml. Its
// versions encode the game version: 21.1.x is for 1.21.1, 21.0.x for
// 1.21, 20.4.x for 1.20.4, year-based 26.1.0.x for 26.1 and 26.1.1.x for
// 26.1.1. Only releases and "-beta" versions are ever chosen: alphas
// ("26.1.0.0-alpha.2+snapshot-1") are for snapshots and never installed,
// not even pinned. "latest" is the newest release; for a game version,
// NEOFORGE_VERSION "latest" is its newest release, or its newest beta when
// it has no release. Game version 1.20.1 comes from net.neoforged:forge
// (1.20.1-47.1.x), NEOFORGE_VERSION naming the part after "1.20.1-".
func (i *Installer) neoforge(ctx context.Context, j job) (catalog.Result, error) {
	nv := j.setting("NEOFORGE_VERSION")
	mc := j.version
	if mc == neoForgeGame {
		return i.neoforge1201(ctx, j, nv)
	}
	versions, err := i.mavenVersions(ctx, neoMaven)
	if err != nil {
		return catalog.Result{}, err
	}
	versions = slices.DeleteFunc(versions, func(v string) bool { return neoChannel(v) == "" })
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(b, a) }) // newest first
	switch {
	case nv != "latest":
		if !slices.Contains(versions, nv) {
			if neoChannel(nv) == "" && validToken(nv) {
				return catalog.Result{}, notFound("neoforge %s is not a release or beta (alpha versions are not installed)", nv)
			}
			return catalog.Result{}, notFound("neoforge has no version %s", nv)
		}
		if mc != "latest" && neoGameVersion(nv) != mc {
			return catalog.Result{}, notFound("neoforge %s is for minecraft %s, not %s", nv, neoGameVersion(nv), mc)
		}
	case mc == "latest":
		for _, v := range versions {
			if neoChannel(v) == "release" {
				nv = v
				break
			}
		}
		if nv == "latest" {
			return catalog.Result{}, notFound("neoforge lists no release")
		}
	default:
		var beta string
		for _, v := range versions {
			if neoGameVersion(v) != mc {
				continue
			}
			if neoChannel(v) == "release" {
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
			return catalog.Result{}, notFound("neoforge has no release or beta for minecraft %s", mc)
		}
	}
	mc = neoGameVersion(nv)
	if !validToken(nv) {
		return catalog.Result{}, fmt.Errorf("neoforge version %q from upstream is not a version", nv)
	}
	libs := "libraries/net/neoforged/neoforge"
	inst, err := i.mavenInstaller(ctx, neoMaven+url.PathEscape(nv)+"/neoforge-"+url.PathEscape(nv)+"-installer.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	res, err := i.runInstaller(ctx, j, inst, "neoforge", libs)
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = mc, nv, j.p.JavaFor(mc)
	if err := i.launchTarget(j, &res, libs+"/"+nv+"/unix_args.txt", nil); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// neoforge1201 installs NeoForge for 1.20.1: net.neoforged:forge, whose
// versions are "1.20.1-47.1.x". NEOFORGE_VERSION "latest" is the newest.
func (i *Installer) neoforge1201(ctx context.Context, j job, nv string) (catalog.Result, error) {
	versions, err := i.mavenVersions(ctx, neoForgeMaven)
	if err != nil {
		return catalog.Result{}, err
	}
	var forks []string
	for _, v := range versions {
		if fv, ok := strings.CutPrefix(v, neoForgeGame+"-"); ok && validToken(fv) && !strings.Contains(fv, "-") {
			forks = append(forks, fv)
		}
	}
	slices.SortFunc(forks, func(a, b string) int { return compareVersions(b, a) })
	switch {
	case len(forks) == 0:
		return catalog.Result{}, notFound("neoforge has no version for minecraft %s", neoForgeGame)
	case nv == "latest":
		nv = forks[0]
	case !slices.Contains(forks, strings.TrimPrefix(nv, neoForgeGame+"-")):
		return catalog.Result{}, notFound("neoforge has no version %s for minecraft %s", nv, neoForgeGame)
	default:
		nv = strings.TrimPrefix(nv, neoForgeGame+"-")
	}
	full := neoForgeGame + "-" + nv
	libs := "libraries/net/neoforged/forge"
	inst, err := i.mavenInstaller(ctx, neoForgeMaven+url.PathEscape(full)+"/forge-"+url.PathEscape(full)+"-installer.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	res, err := i.runInstaller(ctx, j, inst, "neoforge", libs)
	if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor = neoForgeGame, nv, j.p.JavaFor(neoForgeGame)
	if err := i.launchTarget(j, &res, libs+"/"+full+"/unix_args.txt", nil); err != nil {
		return catalog.Result{}, err
	}
	return res, nil
}

// neoChannel classifies a NeoForge version: "release" (no suffix), "beta"
// (the suffix is exactly -beta), or "" for anything else (alpha builds
// such as 26.1.0.0-alpha.2+snapshot-1 or 26.1.1.0-alpha.2+rc-1, and odd
// names), which is never installed.
func neoChannel(v string) string {
	base, suffix, dashed := strings.Cut(v, "-")
	if n, rest := splitVersion(base); len(n) < 3 || rest != "" {
		return ""
	}
	switch {
	case !dashed:
		return "release"
	case suffix == "beta":
		return "beta"
	}
	return ""
}

// mavenVersions reads the <versions> of an artifact's maven-metadata.xml
// (base ends with the artifact's directory and a slash).
func (i *Installer) mavenVersions(ctx context.Context, base string) ([]string, error) {
	body, err := i.fetch.bytes(ctx, base+"maven-metadata.xml")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Versions []string `xml:"versioning>versions>version"`
	}
	if err := xml.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode %smaven-metadata.xml: %w", base, err)
	}
	return doc.Versions, nil
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
// checksum sidecar, into the root, removes the libraries tree of a
// previous install (libs, relative to the root; see cleanLibraries) and
// runs `java -jar <jar> --installServer` (or `java -jar <jar> args…`) there. The installer jar is
// removed afterwards. The
// upstream installer downloads the game jar and libraries itself; the
// mirror does not cover those requests.
func (i *Installer) runInstaller(ctx context.Context, j job, inst installerRef, what, libs string, args ...string) (catalog.Result, error) {
	if len(args) == 0 {
		args = []string{"--installServer"}
	}
	if i.hostJava {
		if _, err := exec.LookPath("java"); err != nil {
			return catalog.Result{}, fmt.Errorf("%s installer needs java on the host (none on PATH; install a JRE): %w", what, ErrNoJava)
		}
	}
	src, algo := inst.URL, inst.Algo
	sha, err := i.artifactInto(ctx, j, artifact{URL: src, Sums: map[string]string{algo: inst.Sum}}, installerJar)
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

// installerRef is an installer jar on a Maven and the checksum its sidecar
// publishes.
type installerRef struct {
	URL, Algo, Sum string
}

// mavenInstaller looks up the checksum sidecar of an installer jar:
// ErrVersionNotFound when the jar does not exist, an error when it exists
// without any checksum.
func (i *Installer) mavenInstaller(ctx context.Context, src string) (installerRef, error) {
	algo, sum, err := i.sidecar(ctx, src)
	if err != nil {
		return installerRef{}, err
	}
	return installerRef{URL: src, Algo: algo, Sum: sum}, nil
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
