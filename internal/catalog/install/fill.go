package install

import (
	"context"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
	"github.com/kilnhq/kiln/internal/validate"
)

// Fill channels a build may be published in, and the values of the
// profile's CHANNEL variable.
const (
	fillChannelDefault      = "default"      // STABLE and RECOMMENDED builds
	fillChannelExperimental = "experimental" // any build: ALPHA, BETA, STABLE, RECOMMENDED
)

// fill installs a Fill v3 project (upstream.Fill says which version and
// build): BUILD_NUMBER and CHANNEL are checked here, the jar is downloaded
// from the URL in the answer and its sha256 verified. The Java major is
// the java.version.minimum Fill publishes for the version, else the
// profile's table.
func (i *Installer) fill(ctx context.Context, j job) (catalog.Result, error) {
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
	rel, err := upstream.Fill(ctx, &i.fetch, j.p.Installer.Project, j.version, build, channel == fillChannelExperimental)
	if err != nil {
		return catalog.Result{}, err
	}
	sha, err := i.artifactInto(ctx, j, rel.Jar, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	java := rel.JavaMajor
	if java <= 0 {
		java = j.p.JavaFor(rel.Version)
	}
	return catalog.Result{
		Version: rel.Version, Build: rel.Build, JavaMajor: java, Jar: "server.jar",
		SHA256: sha, Source: rel.Jar.URL, Checksum: "sha256",
	}, nil
}
