package install

import (
	"context"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// vanilla installs Mojang's server jar as server.jar.
func (i *Installer) vanilla(ctx context.Context, j job) (catalog.Result, error) {
	m, err := i.mojangServer(ctx, j, j.version, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: m.version, JavaMajor: m.java, Jar: "server.jar",
		SHA256: m.sha256, Source: m.url, Checksum: "sha1",
	}, nil
}

type mojangInstall struct {
	version string
	java    int
	sha256  string
	url     string
}

// mojangServer installs the server jar of a game version (upstream.Mojang
// says which; sha1 and size verified) as name. Java comes from
// javaVersion.majorVersion, else from the profile's table.
func (i *Installer) mojangServer(ctx context.Context, j job, version, name string) (mojangInstall, error) {
	rel, err := upstream.Mojang(ctx, &i.fetch, version)
	if err != nil {
		return mojangInstall{}, err
	}
	sha, err := i.artifactInto(ctx, j, rel.Jar, name)
	if err != nil {
		return mojangInstall{}, err
	}
	java := rel.JavaMajor
	if java == 0 {
		java = j.p.JavaFor(rel.Version)
	}
	return mojangInstall{version: rel.Version, java: java, sha256: sha, url: rel.Jar.URL}, nil
}
