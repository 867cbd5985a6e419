package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"

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

// fill installs a Fill v3 project. "latest" is the newest version that has
// a STABLE or RECOMMENDED build; BUILD_NUMBER "latest" is that version's
// newest such build, while a pinned build is taken whatever its channel.
// The jar is downloaded from the URL in the answer, never a built one, and
// its sha256 verified.
func (i *Installer) fill(ctx context.Context, j job) (catalog.Result, error) {
	project := j.p.Installer.Project
	build := j.setting("BUILD_NUMBER")
	if build != "latest" {
		if _, err := strconv.Atoi(build); err != nil {
			return catalog.Result{}, validate.Errorf("env.BUILD_NUMBER", "%q is not a build number", build)
		}
	}
	versions, err := i.fillVersions(ctx, project)
	if err != nil {
		return catalog.Result{}, err
	}
	candidates := versions
	if j.version == "latest" {
		candidates = versions[:min(len(versions), fillLatestScan)]
	} else {
		if !slices.Contains(versions, j.version) {
			return catalog.Result{}, notFound("%s has no version %s", project, j.version)
		}
		candidates = []string{j.version}
	}
	for _, v := range candidates {
		var builds []fillBuild
		if err := i.fetch.json(ctx, fillBase+project+"/versions/"+url.PathEscape(v)+"/builds", &builds); err != nil {
			return catalog.Result{}, err
		}
		b, ok := pickFillBuild(builds, build)
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
		return catalog.Result{
			Version: v, Build: strconv.Itoa(b.ID), JavaMajor: j.p.JavaFor(v), Jar: "server.jar",
			SHA256: sha, Source: d.URL, Checksum: "sha256",
		}, nil
	}
	if build != "latest" {
		return catalog.Result{}, notFound("%s %s has no build %s", project, j.version, build)
	}
	if j.version == "latest" {
		return catalog.Result{}, notFound("none of the %d newest %s versions has a stable build", len(candidates), project)
	}
	return catalog.Result{}, notFound("%s %s has no STABLE or RECOMMENDED build (set BUILD_NUMBER to pin one)", project, j.version)
}

// fillVersions returns the project's versions, newest first, in the order
// of the answer: {"versions": {"1.21": ["1.21.4", "1.21.3"], "1.20": […]}}.
// The object is read token by token because its key order carries the
// order of the version groups.
func (i *Installer) fillVersions(ctx context.Context, project string) ([]string, error) {
	var doc struct {
		Versions json.RawMessage `json:"versions"`
	}
	if err := i.fetch.json(ctx, fillBase+project, &doc); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc.Versions))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("decode %s versions: not an object", project)
	}
	var out []string
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the group key
			return nil, fmt.Errorf("decode %s versions: %w", project, err)
		}
		var group []string
		if err := dec.Decode(&group); err != nil {
			return nil, fmt.Errorf("decode %s versions: %w", project, err)
		}
		out = append(out, group...)
	}
	return out, nil
}

// pickFillBuild returns the build to install: the pinned one, or the
// newest STABLE or RECOMMENDED one. Fill lists builds newest first; they are
// sorted by id anyway so the choice does not depend on that.
func pickFillBuild(builds []fillBuild, build string) (fillBuild, bool) {
	builds = slices.Clone(builds)
	slices.SortStableFunc(builds, func(a, b fillBuild) int { return b.ID - a.ID })
	for _, b := range builds {
		if build == "latest" {
			if b.Channel == "STABLE" || b.Channel == "RECOMMENDED" {
				return b, true
			}
		} else if strconv.Itoa(b.ID) == build {
			return b, true
		}
	}
	return fillBuild{}, false
}
