package install

import (
	"context"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// purpur installs Purpur (upstream.Purpur says which version and build),
// verified against the build's md5.
func (i *Installer) purpur(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.Purpur(ctx, &i.fetch, j.version, j.setting("BUILD_NUMBER"))
	if err != nil {
		return catalog.Result{}, err
	}
	sha, err := i.artifactInto(ctx, j, rel.Jar, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: rel.Version, Build: rel.Build, JavaMajor: j.p.JavaFor(rel.Version), Jar: "server.jar",
		SHA256: sha, Source: rel.Jar.URL, Checksum: "md5",
	}, nil
}
