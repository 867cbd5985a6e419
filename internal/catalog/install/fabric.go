package install

import (
	"context"
	"fmt"
	"net/url"
	"path"

	"github.com/kilnhq/kiln/internal/catalog"
)

// fabricBase is Fabric's metadata service (v2).
const fabricBase = "https://meta.fabricmc.net/v2"

// fabricLauncher is the name of the Fabric server launcher in the root.
const fabricLauncher = "fabric-server-launcher.jar"

// fabricGameJar is where the launcher looks for the vanilla server jar,
// relative to its working directory (the root): FabricMC/fabric-installer
// src/main/java/net/fabricmc/installer/ServerLauncher.java (commit
// 33fcad86, 2025-07-03) has DATA_DIR = Paths.get(".fabric", "server")
// (line 48) and serverJar = dataDir.resolve("<game>-server.jar") unless
// -Dfabric.installer.server.gameJar is set (lines 90-95); it downloads the
// jar only when that file does not exist (line 99). It reads no
// fabric-server-launcher.properties.
func fabricGameJar(game string) string {
	return path.Join(".fabric", "server", game+"-server.jar")
}

type fabricVersion struct {
	Version string `json:"version"`
	Stable  bool   `json:"stable"`
}

// fabric installs Mojang's server jar (sha1-verified) where the launcher
// looks for it, so the launcher does not download it again at first start,
// and Fabric's server launcher for the game, loader and installer
// versions. Fabric publishes no checksum of the launcher: Result.Checksum
// is empty and SHA256 is what Kiln computed; the cache keys the launcher by
// its URL, which pins all three versions. At first start the launcher
// still downloads the loader's libraries from Fabric's Maven itself; the
// mirror does not cover that.
func (i *Installer) fabric(ctx context.Context, j job) (catalog.Result, error) {
	game, err := i.fabricPick(ctx, "game", j.version)
	if err != nil {
		return catalog.Result{}, err
	}
	loader, err := i.fabricLoader(ctx, game, j.setting("LOADER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	inst, err := i.fabricPick(ctx, "installer", j.setting("INSTALLER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	m, err := i.mojangServer(ctx, j, game, fabricGameJar(game))
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
// first stable entry of the list (newest first); "snapshot" (game only) is
// the first entry whatever its stability, as Mojang's latest.snapshot is
// the newest version of any kind; any other value must be listed.
func (i *Installer) fabricPick(ctx context.Context, kind, want string) (string, error) {
	var list []fabricVersion
	if err := i.fetch.json(ctx, fabricBase+"/versions/"+kind, &list); err != nil {
		return "", err
	}
	if want == "snapshot" && kind == "game" && len(list) > 0 {
		return list[0].Version, nil
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

// fabricLoader resolves the loader among those meta lists for the game
// (/v2/versions/loader/<game>, newest first): "latest" is the first
// stable one; any other value must be listed.
func (i *Installer) fabricLoader(ctx context.Context, game, want string) (string, error) {
	var list []struct {
		Loader fabricVersion `json:"loader"`
	}
	if err := i.fetch.json(ctx, fabricBase+"/versions/loader/"+url.PathEscape(game), &list); err != nil {
		return "", err
	}
	for _, v := range list {
		if want == "latest" && v.Loader.Stable || v.Loader.Version == want {
			if !validToken(v.Loader.Version) {
				return "", fmt.Errorf("fabric loader version %q from upstream is not a version", v.Loader.Version)
			}
			return v.Loader.Version, nil
		}
	}
	if want == "latest" {
		return "", notFound("fabric lists no stable loader for minecraft %s", game)
	}
	return "", notFound("fabric has no loader version %s for minecraft %s", want, game)
}
