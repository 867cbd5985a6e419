package install

import (
	"context"
	"fmt"
	"net/url"
	"slices"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

// purpurBase is Purpur's download API (v2).
const purpurBase = "https://api.purpurmc.org/v2/purpur"

// purpur installs Purpur: "latest" is the project's metadata.current, the
// version Purpur's maintainers mark as current (the API lists versions
// oldest first, and the last one can be a newer line not yet marked
// current: a capture shows current 1.21.1 while 1.21.3 is listed last);
// without metadata.current it is the last version listed.
// BUILD_NUMBER "latest" is builds.latest; the build's metadata gives the
// md5 the download is verified against.
func (i *Installer) purpur(ctx context.Context, j job) (catalog.Result, error) {
	var project struct {
		Metadata struct {
			Current string `json:"current"`
		} `json:"metadata"`
		Versions []string `json:"versions"`
	}
	if err := i.fetch.json(ctx, purpurBase, &project); err != nil {
		return catalog.Result{}, err
	}
	version := j.version
	if version == "latest" {
		if len(project.Versions) == 0 {
			return catalog.Result{}, notFound("purpur lists no versions")
		}
		version = project.Versions[len(project.Versions)-1]
		// A current version the list does not hold is not trusted: the
		// list is what the API can answer builds for.
		if c := project.Metadata.Current; c != "" && slices.Contains(project.Versions, c) {
			version = c
		}
	} else if !slices.Contains(project.Versions, version) {
		return catalog.Result{}, notFound("purpur has no version %s", version)
	}
	vbase := purpurBase + "/" + url.PathEscape(version)

	var v struct {
		Builds struct {
			Latest string   `json:"latest"`
			All    []string `json:"all"`
		} `json:"builds"`
	}
	if err := i.fetch.json(ctx, vbase, &v); err != nil {
		return catalog.Result{}, err
	}
	build := j.setting("BUILD_NUMBER")
	switch {
	case build == "latest":
		build = v.Builds.Latest
		if build == "" {
			return catalog.Result{}, notFound("purpur %s has no build", version)
		}
	case !slices.Contains(v.Builds.All, build):
		return catalog.Result{}, notFound("purpur %s has no build %s", version, build)
	}
	if !validToken(build) {
		return catalog.Result{}, validate.Errorf("env.BUILD_NUMBER", "%q is not a build number", build)
	}
	bbase := vbase + "/" + url.PathEscape(build)

	var meta struct {
		MD5    string `json:"md5"`
		Result string `json:"result"`
	}
	if err := i.fetch.json(ctx, bbase, &meta); err != nil {
		return catalog.Result{}, err
	}
	if meta.Result != "" && meta.Result != "SUCCESS" {
		return catalog.Result{}, notFound("purpur %s build %s is a failed build (%s)", version, build, meta.Result)
	}
	if !isHex(meta.MD5, 32) {
		return catalog.Result{}, fmt.Errorf("purpur %s build %s: upstream published no md5", version, build)
	}
	src := bbase + "/download"
	sha, err := i.artifactInto(ctx, j, artifact{URL: src, Sums: map[string]string{"md5": meta.MD5}}, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: version, Build: build, JavaMajor: j.p.JavaFor(version), Jar: "server.jar",
		SHA256: sha, Source: src, Checksum: "md5",
	}, nil
}
