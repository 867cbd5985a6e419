package install

import (
	"context"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// bungeecord installs BungeeCord (upstream.BungeeCord says which build),
// verified against the MD5 Jenkins computed of the archived jar.
func (i *Installer) bungeecord(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.BungeeCord(ctx, &i.fetch, j.version)
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
