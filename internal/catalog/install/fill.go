package install

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

// fillBase is PaperMC's download service (Fill v3), serving Paper, Folia,
// Velocity and Waterfall.
const fillBase = "https://fill.papermc.io/v3/projects/"

// fillLatestScan bounds how many of the newest versions "latest" looks at
// for one with a stable build.
const fillLatestScan = 8

type fillBuild struct {
	ID        int                     `json:"id"`
	Channel   string                  `json:"channel"` // ALPHA, BETA, STABLE, RECOMMENDED
	Downloads map[string]fillDownload `json:"downloads"`
}

type fillDownload struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	URL       string `json:"url"`
	Checksums struct {
		SHA256 string `json:"sha256"`
	} `json:"checksums"`
}

// fillVersion is one entry of /v3/projects/{project}/versions.
type fillVersion struct {
	Version struct {
		ID   string `json:"id"`
		Java struct {
			Version struct {
				Minimum int `json:"minimum"`
			} `json:"version"`
		} `json:"java"`
	} `json:"version"`
	Builds []int `json:"builds"`
}

// Fill channels a build may be published in, and the values of the
// profile's CHANNEL variable.
const (
	fillChannelDefault      = "default"      // STABLE and RECOMMENDED builds
	fillChannelExperimental = "experimental" // any build: ALPHA, BETA, STABLE, RECOMMENDED
)

// fill installs a Fill v3 project. "latest" is the newest version that has
// a STABLE or RECOMMENDED build (CHANNEL=experimental: any build);
// BUILD_NUMBER "latest" is that version's newest such build, while a
// pinned build is taken whatever its channel. The jar is downloaded from
// the URL in the answer, never a built one, and its sha256 verified. The
// Java major is the java.version.minimum Fill publishes for the version.
func (i *Installer) fill(ctx context.Context, j job) (catalog.Result, error) {
	project := j.p.Installer.Project
	build := j.setting("BUILD_NUMBER")
	if build != "latest" {
		if _, err := strconv.Atoi(build); err != nil {
			return catalog.Result{}, validate.Errorf("env.BUILD_NUMBER", "%q is not a build number", build)
		}
	}
	channel := fillChannelDefault
	if _, ok := j.p.Var("CHANNEL"); ok {
		switch c := strings.ToLower(j.env["CHANNEL"]); c {
		case "", fillChannelDefault:
		case fillChannelExperimental:
			channel = c
		default:
			return catalog.Result{}, validate.Errorf("env.CHANNEL", "%q is not a channel (default or experimental)", j.env["CHANNEL"])
		}
	}
	var list struct {
		Versions []fillVersion `json:"versions"`
	}
	if err := i.fetch.json(ctx, fillBase+project+"/versions", &list); err != nil {
		return catalog.Result{}, err
	}
	// Fill lists versions most recently created first (PaperMC/fill's
	// VersionRepository sorts by createdAt); that order is kept, as itzg's
	// mc-image-helper keeps it (version names such as 1.21.9-rc1 or
	// 3.4.0-SNAPSHOT do not sort by themselves).
	var candidates []fillVersion
	if j.version == "latest" {
		for _, v := range list.Versions {
			if len(v.Builds) > 0 && len(candidates) < fillLatestScan {
				candidates = append(candidates, v)
			}
		}
	} else {
		for _, v := range list.Versions {
			if v.Version.ID == j.version {
				candidates = []fillVersion{v}
			}
		}
		if candidates == nil {
			return catalog.Result{}, notFound("%s has no version %s", project, j.version)
		}
	}
	for _, fv := range candidates {
		v := fv.Version.ID
		var builds []fillBuild
		if err := i.fetch.json(ctx, fillBase+project+"/versions/"+url.PathEscape(v)+"/builds", &builds); err != nil {
			return catalog.Result{}, err
		}
		b, ok := pickFillBuild(builds, build, channel)
		if !ok {
			continue
		}
		d, ok := b.Downloads["server:default"]
		if !ok || d.URL == "" {
			return catalog.Result{}, fmt.Errorf("%s %s build %d has no server:default download", project, v, b.ID)
		}
		if !isHex(d.Checksums.SHA256, 64) {
			return catalog.Result{}, fmt.Errorf("%s %s build %d: upstream published no sha256", project, v, b.ID)
		}
		a := artifact{URL: d.URL, Size: d.Size, Sums: map[string]string{"sha256": d.Checksums.SHA256}}
		sha, err := i.artifactInto(ctx, j, a, "server.jar")
		if err != nil {
			return catalog.Result{}, err
		}
		java := fv.Version.Java.Version.Minimum
		if java <= 0 {
			java = j.p.JavaFor(v)
		}
		return catalog.Result{
			Version: v, Build: strconv.Itoa(b.ID), JavaMajor: java, Jar: "server.jar",
			SHA256: sha, Source: d.URL, Checksum: "sha256",
		}, nil
	}
	if build != "latest" {
		return catalog.Result{}, notFound("%s %s has no build %s", project, j.version, build)
	}
	if j.version == "latest" {
		return catalog.Result{}, notFound("none of the %d newest %s versions has a stable build", len(candidates), project)
	}
	return catalog.Result{}, notFound("%s %s has no STABLE or RECOMMENDED build (set BUILD_NUMBER to pin one, or CHANNEL=experimental)", project, j.version)
}

// pickFillBuild returns the build to install: the pinned one, or the
// newest one of the channel (default: STABLE or RECOMMENDED; experimental:
// any). Fill lists builds newest first; they are sorted by id anyway so
// the choice does not depend on that.
func pickFillBuild(builds []fillBuild, build, channel string) (fillBuild, bool) {
	builds = slices.Clone(builds)
	slices.SortStableFunc(builds, func(a, b fillBuild) int { return b.ID - a.ID })
	for _, b := range builds {
		if build == "latest" {
			if channel == fillChannelExperimental || b.Channel == "STABLE" || b.Channel == "RECOMMENDED" {
				return b, true
			}
		} else if strconv.Itoa(b.ID) == build {
			return b, true
		}
	}
	return fillBuild{}, false
}
