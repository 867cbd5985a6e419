package install

import (
	"context"
	"path"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

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

// fabric installs Mojang's server jar (sha1-verified) where the launcher
// looks for it, so the launcher does not download it again at first start,
// and Fabric's server launcher for the game, loader and installer
// versions (upstream.Fabric says which). Fabric publishes no checksum of
// the launcher: Result.Checksum is empty and SHA256 is what Kiln computed;
// the cache keys the launcher by its URL, which pins all three versions.
// At first start the launcher still downloads the loader's libraries from
// Fabric's Maven itself; the mirror does not cover that.
func (i *Installer) fabric(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.Fabric(ctx, &i.fetch, j.version, j.setting("LOADER_VERSION"), j.setting("INSTALLER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	m, err := i.mojangServer(ctx, j, rel.Game, fabricGameJar(rel.Game))
	if err != nil {
		return catalog.Result{}, err
	}
	sha, err := i.artifactInto(ctx, j, rel.Launcher, fabricLauncher)
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: rel.Game, Build: rel.Loader, JavaMajor: m.java, Jar: fabricLauncher,
		SHA256: sha, Source: rel.Launcher.URL, Checksum: "",
	}, nil
}
