package upstream

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
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

// Release is what an upstream names for a request: a concrete version and
// build, the Java major it publishes (0 for none) and the jar.
type Release struct {
	Version   string
	Build     string
	JavaMajor int
	Jar       Artifact
}

// Fill resolves a Fill v3 project's version ("latest": the newest version
// that has a STABLE or RECOMMENDED build; with experimental, any build)
// and build ("latest": that version's newest such build; a pinned build is
// taken whatever its channel). The jar is the URL in the answer, never a
// built one, with its sha256; JavaMajor is the java.version.minimum Fill
// publishes for the version.
func Fill(ctx context.Context, f *Fetcher, project, version, build string, experimental bool) (Release, error) {
	var list struct {
		Versions []fillVersion `json:"versions"`
	}
	if err := f.JSON(ctx, fillBase+project+"/versions", &list); err != nil {
		return Release{}, err
	}
	// Fill lists versions most recently created first (PaperMC/fill's
	// VersionRepository sorts by createdAt); that order is kept, as itzg's
	// mc-image-helper keeps it (version names such as 1.21.9-rc1 or
	// 3.4.0-SNAPSHOT do not sort by themselves).
	var candidates []fillVersion
	if version == "latest" {
		for _, v := range list.Versions {
			if len(v.Builds) > 0 && len(candidates) < fillLatestScan {
				candidates = append(candidates, v)
			}
		}
	} else {
		for _, v := range list.Versions {
			if v.Version.ID == version {
				candidates = []fillVersion{v}
			}
		}
		if candidates == nil {
			return Release{}, notFound("%s has no version %s", project, version)
		}
	}
	for _, fv := range candidates {
		v := fv.Version.ID
		var builds []fillBuild
		if err := f.JSON(ctx, fillBase+project+"/versions/"+url.PathEscape(v)+"/builds", &builds); err != nil {
			return Release{}, err
		}
		b, ok := pickFillBuild(builds, build, experimental)
		if !ok {
			continue
		}
		d, ok := b.Downloads["server:default"]
		if !ok || d.URL == "" {
			return Release{}, fmt.Errorf("%s %s build %d has no server:default download", project, v, b.ID)
		}
		if !IsHex(d.Checksums.SHA256, 64) {
			return Release{}, fmt.Errorf("%s %s build %d: upstream published no sha256", project, v, b.ID)
		}
		return Release{
			Version: v, Build: strconv.Itoa(b.ID), JavaMajor: fv.Version.Java.Version.Minimum,
			Jar: Artifact{URL: d.URL, Size: d.Size, Sums: map[string]string{"sha256": d.Checksums.SHA256}},
		}, nil
	}
	if build != "latest" {
		return Release{}, notFound("%s %s has no build %s", project, version, build)
	}
	if version == "latest" {
		return Release{}, notFound("none of the %d newest %s versions has a stable build", len(candidates), project)
	}
	return Release{}, notFound("%s %s has no STABLE or RECOMMENDED build (set BUILD_NUMBER to pin one, or CHANNEL=experimental)", project, version)
}

// pickFillBuild returns the build to install: the pinned one, or the
// newest one of the channel (default: STABLE or RECOMMENDED; experimental:
// any). Fill lists builds newest first; they are sorted by id anyway so
// the choice does not depend on that.
func pickFillBuild(builds []fillBuild, build string, experimental bool) (fillBuild, bool) {
	builds = slices.Clone(builds)
	slices.SortStableFunc(builds, func(a, b fillBuild) int { return b.ID - a.ID })
	for _, b := range builds {
		if build == "latest" {
			if experimental || b.Channel == "STABLE" || b.Channel == "RECOMMENDED" {
				return b, true
			}
		} else if strconv.Itoa(b.ID) == build {
			return b, true
		}
	}
	return fillBuild{}, false
}
