package install

import (
	"context"
	"net/url"

	"github.com/kilnhq/kiln/internal/catalog"
)

// fabricBase is Fabric's metadata service (v2).
const fabricBase = "https://meta.fabricmc.net/v2"

// fabricLauncher is the name of the Fabric server launcher in the root. It
// must not be server.jar: the launcher looks for the vanilla jar under that
// name (fabric-server-launcher.properties, serverJar=server.jar).
const fabricLauncher = "fabric-server-launcher.jar"

type fabricVersion struct {
	Version string `json:"version"`
	Stable  bool   `json:"stable"`
}

// fabric installs Mojang's server jar as server.jar (sha1-verified, so the
// launcher does not fetch it at first start) and Fabric's server launcher
// for the game, loader and installer versions. Fabric publishes no checksum
// of the launcher: Result.Checksum is empty and SHA256 is what Kiln
// computed; the cache keys the launcher by its URL, which pins all three
// versions. At first start the launcher still downloads the loader's
// libraries from Fabric's Maven itself; the mirror does not cover that.
func (i *Installer) fabric(ctx context.Context, j job) (catalog.Result, error) {
	game, err := i.fabricPick(ctx, "game", j.version)
	if err != nil {
		return catalog.Result{}, err
	}
	loader, err := i.fabricPick(ctx, "loader", j.setting("LOADER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	inst, err := i.fabricPick(ctx, "installer", j.setting("INSTALLER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	m, err := i.mojangServer(ctx, j, game, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	src := fabricBase + "/versions/loader/" + url.PathEscape(game) + "/" + url.PathEscape(loader) + "/" +
		url.PathEscape(inst) + "/server/jar"
	sha, err := i.artifactInto(ctx, j, artifact{URL: src}, fabricLauncher)
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: game, Build: loader, JavaMajor: m.java, Jar: fabricLauncher,
		SHA256: sha, Source: src, Checksum: "",
	}, nil
}

// fabricPick resolves a game, loader or installer version: "latest" is the
// first stable entry of the list (newest first); any other value must be
// listed.
func (i *Installer) fabricPick(ctx context.Context, kind, want string) (string, error) {
	var list []fabricVersion
	if err := i.fetch.json(ctx, fabricBase+"/versions/"+kind, &list); err != nil {
		return "", err
	}
	for _, v := range list {
		if want == "latest" && v.Stable || v.Version == want {
			return v.Version, nil
		}
	}
	if want == "latest" {
		return "", notFound("fabric lists no stable %s version", kind)
	}
	return "", notFound("fabric has no %s version %s", kind, want)
}
