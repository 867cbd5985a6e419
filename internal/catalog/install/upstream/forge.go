package upstream

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

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

// LoaderRelease is a Forge or NeoForge version and the installer jar that
// installs it, with the checksum its Maven sidecar publishes.
type LoaderRelease struct {
	Game    string // the game version
	Version string // the loader's own version (FORGE_VERSION, NEOFORGE_VERSION)
	// Coordinate is the Maven version the installer is published under:
	// <mc>-<forge>[-<mc>|-mc172] for Forge, <nv> for NeoForge,
	// 1.20.1-<nv> for NeoForge 1.20.1.
	Coordinate string
	// ArtifactID is the Maven artifact: forge (Forge, NeoForge 1.20.1) or
	// neoforge. The installer keeps its libraries under
	// libraries/<group path>/<ArtifactID>/<Coordinate>.
	ArtifactID string
	Installer  Artifact
}

// Forge resolves the game version ("latest" = the newest one with a
// promotion) and the Forge version ("recommended", falling back to the
// latest promotion when none is recommended, "latest" or an explicit
// version) to the installer jar on Forge's Maven.
func Forge(ctx context.Context, f *Fetcher, mc, fv string) (LoaderRelease, error) {
	var promos struct {
		Promos map[string]string `json:"promos"`
	}
	if err := f.JSON(ctx, forgePromotions, &promos); err != nil {
		return LoaderRelease{}, err
	}
	if mc == "latest" {
		for key := range promos.Promos {
			if v, ok := strings.CutSuffix(key, "-latest"); ok && (mc == "latest" || compareVersions(v, mc) > 0) {
				mc = v
			}
		}
		if mc == "latest" {
			return LoaderRelease{}, notFound("forge lists no promoted version")
		}
	}
	switch fv {
	case "recommended", "latest":
		v, ok := promos.Promos[mc+"-"+fv]
		if !ok && fv == "recommended" {
			v, ok = promos.Promos[mc+"-latest"]
		}
		if !ok {
			return LoaderRelease{}, notFound("forge has no promoted version for minecraft %s (set FORGE_VERSION to pin one)", mc)
		}
		fv = v
	}
	if !ValidToken(mc + "-" + fv) {
		return LoaderRelease{}, validate.Errorf("env.FORGE_VERSION", "%q is not a forge version", fv)
	}
	// Every few major versions Forge changed how it names its Maven
	// versions: 1.7.10 and 1.8.9 builds carry the game version again
	// (1.7.10-10.13.4.1614-1.7.10), some 1.7.2 ones "-mc172". Each name is
	// tried in this order, as itzg/mc-image-helper's ForgeInstallerResolver
	// does; the first with a published installer wins.
	var (
		full string
		inst Artifact
	)
	for _, name := range []string{mc + "-" + fv, mc + "-" + fv + "-" + mc, mc + "-" + fv + "-mc172"} {
		src := forgeMaven + url.PathEscape(name) + "/forge-" + url.PathEscape(name) + "-installer.jar"
		ref, err := mavenInstaller(ctx, f, src)
		if errors.Is(err, ErrVersionNotFound) {
			continue
		}
		if err != nil {
			return LoaderRelease{}, err
		}
		full, inst = name, ref
		break
	}
	if full == "" {
		return LoaderRelease{}, notFound("forge has no installer for minecraft %s forge %s", mc, fv)
	}
	return LoaderRelease{Game: mc, Version: fv, Coordinate: full, ArtifactID: "forge", Installer: inst}, nil
}

// NeoForge resolves a NeoForge version from its Maven's maven-metadata.xml
// to its installer jar. Its
// versions encode the game version: 21.1.x is for 1.21.1, 21.0.x for
// 1.21, 20.4.x for 1.20.4, year-based 26.1.0.x for 26.1 and 26.1.1.x for
// 26.1.1. Only releases and "-beta" versions are ever chosen: alphas
// ("26.1.0.0-alpha.2+snapshot-1") are for snapshots and never installed,
// not even pinned. "latest" is the newest release; for a game version,
// NEOFORGE_VERSION "latest" is its newest release, or its newest beta when
// it has no release. Game version 1.20.1 comes from net.neoforged:forge
// (1.20.1-47.1.x), nv naming the part after "1.20.1-".
func NeoForge(ctx context.Context, f *Fetcher, mc, nv string) (LoaderRelease, error) {
	if mc == neoForgeGame {
		return neoforge1201(ctx, f, nv)
	}
	versions, err := mavenVersions(ctx, f, neoMaven)
	if err != nil {
		return LoaderRelease{}, err
	}
	versions = slices.DeleteFunc(versions, func(v string) bool { return neoChannel(v) == "" })
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(b, a) }) // newest first
	switch {
	case nv != "latest":
		if !slices.Contains(versions, nv) {
			if neoChannel(nv) == "" && ValidToken(nv) {
				return LoaderRelease{}, notFound("neoforge %s is not a release or beta (alpha versions are not installed)", nv)
			}
			return LoaderRelease{}, notFound("neoforge has no version %s", nv)
		}
		if mc != "latest" && neoGameVersion(nv) != mc {
			return LoaderRelease{}, notFound("neoforge %s is for minecraft %s, not %s", nv, neoGameVersion(nv), mc)
		}
	case mc == "latest":
		for _, v := range versions {
			if neoChannel(v) == "release" {
				nv = v
				break
			}
		}
		if nv == "latest" {
			return LoaderRelease{}, notFound("neoforge lists no release")
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
			return LoaderRelease{}, notFound("neoforge has no release or beta for minecraft %s", mc)
		}
	}
	mc = neoGameVersion(nv)
	if !ValidToken(nv) {
		return LoaderRelease{}, fmt.Errorf("neoforge version %q from upstream is not a version", nv)
	}
	inst, err := mavenInstaller(ctx, f, neoMaven+url.PathEscape(nv)+"/neoforge-"+url.PathEscape(nv)+"-installer.jar")
	if err != nil {
		return LoaderRelease{}, err
	}
	return LoaderRelease{Game: mc, Version: nv, Coordinate: nv, ArtifactID: "neoforge", Installer: inst}, nil
}

// neoforge1201 resolves NeoForge for 1.20.1: net.neoforged:forge, whose
// versions are "1.20.1-47.1.x". nv "latest" is the newest.
func neoforge1201(ctx context.Context, f *Fetcher, nv string) (LoaderRelease, error) {
	versions, err := mavenVersions(ctx, f, neoForgeMaven)
	if err != nil {
		return LoaderRelease{}, err
	}
	var forks []string
	for _, v := range versions {
		if fv, ok := strings.CutPrefix(v, neoForgeGame+"-"); ok && ValidToken(fv) && !strings.Contains(fv, "-") {
			forks = append(forks, fv)
		}
	}
	slices.SortFunc(forks, func(a, b string) int { return compareVersions(b, a) })
	switch {
	case len(forks) == 0:
		return LoaderRelease{}, notFound("neoforge has no version for minecraft %s", neoForgeGame)
	case nv == "latest":
		nv = forks[0]
	case !slices.Contains(forks, strings.TrimPrefix(nv, neoForgeGame+"-")):
		return LoaderRelease{}, notFound("neoforge has no version %s for minecraft %s", nv, neoForgeGame)
	default:
		nv = strings.TrimPrefix(nv, neoForgeGame+"-")
	}
	full := neoForgeGame + "-" + nv
	inst, err := mavenInstaller(ctx, f, neoForgeMaven+url.PathEscape(full)+"/forge-"+url.PathEscape(full)+"-installer.jar")
	if err != nil {
		return LoaderRelease{}, err
	}
	return LoaderRelease{Game: neoForgeGame, Version: nv, Coordinate: full, ArtifactID: "forge", Installer: inst}, nil
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
func mavenVersions(ctx context.Context, f *Fetcher, base string) ([]string, error) {
	body, err := f.Bytes(ctx, base+"maven-metadata.xml")
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

// mavenInstaller looks up the checksum sidecar of an installer jar and
// returns the jar with that checksum: ErrVersionNotFound when the jar
// does not exist, an error when it exists without any checksum.
func mavenInstaller(ctx context.Context, f *Fetcher, src string) (Artifact, error) {
	algo, sum, err := sidecar(ctx, f, src)
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{URL: src, Sums: map[string]string{algo: sum}}, nil
}

// sidecar fetches the checksum Maven publishes next to an artifact, trying
// the strongest first: .sha256, .sha1, .md5. When none exists it asks for
// the artifact itself (HEAD) to tell a missing version (ErrVersionNotFound)
// from an artifact published without a checksum, which is refused.
func sidecar(ctx context.Context, f *Fetcher, src string) (algo, sum string, err error) {
	for _, a := range []struct {
		algo string
		n    int
	}{{"sha256", 64}, {"sha1", 40}, {"md5", 32}} {
		body, err := f.Bytes(ctx, src+"."+a.algo)
		if IsStatus(err, http.StatusNotFound) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		// A sidecar is the hex digest, sometimes followed by a file name.
		f := strings.Fields(string(body))
		if len(f) == 0 || !IsHex(strings.ToLower(f[0]), a.n) {
			return "", "", fmt.Errorf("%s.%s is not a %s checksum", src, a.algo, a.algo)
		}
		return a.algo, strings.ToLower(f[0]), nil
	}
	hctx, cancel := context.WithTimeout(ctx, MetaTimeout)
	defer cancel()
	resp, err := f.Do(hctx, http.MethodHead, src)
	if IsStatus(err, http.StatusNotFound) {
		return "", "", fmt.Errorf("%s: %w (%w)", src, ErrVersionNotFound, err)
	}
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	return "", "", fmt.Errorf("%s: upstream publishes no .sha256, .sha1 or .md5 checksum; refusing an unverifiable installer", src)
}
