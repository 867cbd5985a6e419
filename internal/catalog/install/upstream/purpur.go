package upstream

import (
	"context"
	"fmt"
	"net/url"
	"slices"

	"github.com/kilnhq/kiln/internal/validate"
)

// purpurBase is Purpur's download API (v2).
const purpurBase = "https://api.purpurmc.org/v2/purpur"

// Purpur resolves a Purpur version and build: "latest" is the project's
// metadata.current, the version Purpur's maintainers mark as current (the
// API lists versions
// oldest first, and the last one can be a newer line not yet marked
// current: a capture shows current 1.21.1 while 1.21.3 is listed last);
// without metadata.current it is the last version listed.
// build "latest" is builds.latest; the build's metadata gives the md5 the
// download is verified against. JavaMajor is 0: Purpur publishes none.
func Purpur(ctx context.Context, f *Fetcher, version, build string) (Release, error) {
	var project struct {
		Metadata struct {
			Current string `json:"current"`
		} `json:"metadata"`
		Versions []string `json:"versions"`
	}
	if err := f.JSON(ctx, purpurBase, &project); err != nil {
		return Release{}, err
	}
	if version == "latest" {
		if len(project.Versions) == 0 {
			return Release{}, notFound("purpur lists no versions")
		}
		version = project.Versions[len(project.Versions)-1]
		// A current version the list does not hold is not trusted: the
		// list is what the API can answer builds for.
		if c := project.Metadata.Current; c != "" && slices.Contains(project.Versions, c) {
			version = c
		}
	} else if !slices.Contains(project.Versions, version) {
		return Release{}, notFound("purpur has no version %s", version)
	}
	vbase := purpurBase + "/" + url.PathEscape(version)

	var v struct {
		Builds struct {
			Latest string   `json:"latest"`
			All    []string `json:"all"`
		} `json:"builds"`
	}
	if err := f.JSON(ctx, vbase, &v); err != nil {
		return Release{}, err
	}
	switch {
	case build == "latest":
		build = v.Builds.Latest
		if build == "" {
			return Release{}, notFound("purpur %s has no build", version)
		}
	case !slices.Contains(v.Builds.All, build):
		return Release{}, notFound("purpur %s has no build %s", version, build)
	}
	if !ValidToken(build) {
		return Release{}, validate.Errorf("env.BUILD_NUMBER", "%q is not a build number", build)
	}
	bbase := vbase + "/" + url.PathEscape(build)

	var meta struct {
		MD5    string `json:"md5"`
		Result string `json:"result"`
	}
	if err := f.JSON(ctx, bbase, &meta); err != nil {
		return Release{}, err
	}
	if meta.Result != "" && meta.Result != "SUCCESS" {
		return Release{}, notFound("purpur %s build %s is a failed build (%s)", version, build, meta.Result)
	}
	if !IsHex(meta.MD5, 32) {
		return Release{}, fmt.Errorf("purpur %s build %s: upstream published no md5", version, build)
	}
	src := bbase + "/download"
	return Release{Version: version, Build: build, Jar: Artifact{URL: src, Sums: map[string]string{"md5": meta.MD5}}}, nil
}
