package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

// quiltLauncher is the jar quilt-installer's `install server` builds in
// the install directory (QuiltMC/quilt-installer
// src/main/java/org/quiltmc/installer/action/InstallServer.java, commit
// fce5fbc2, 2026-07-05, line 109).
const quiltLauncher = "quilt-server-launch.jar"

// quilt installs Quilt. Quilt's meta serves no ready server launcher (it
// serves the launch profile, /v3/versions/loader/<game>/<loader>/server/json,
// which quilt-installer turns into quilt-server-launch.jar), so the
// installer is the upstream's own: quilt-installer, downloaded from the URL
// meta gives (Quilt's Maven), verified against that Maven's checksum
// sidecar, and run as `java -jar <installer> install server <game>
// <loader> --install-dir=.` in the root. It downloads the loader's
// libraries into libraries/ from Quilt's Maven itself, outside the mirror
// and without a checksum Kiln could check. The vanilla jar is Kiln's
// download (Mojang's sha1 verified), written as server.jar where
// quilt-installer's --download-server would put it (InstallServer.java
// line 156); that option is not passed. The installer reports failures
// with a stack trace but may still exit 0, so the launcher's presence is
// checked afterwards.
// upstream.Quilt says which game, loader and installer versions.
func (i *Installer) quilt(ctx context.Context, j job) (catalog.Result, error) {
	rel, err := upstream.Quilt(ctx, &i.fetch, j.version, j.setting("LOADER_VERSION"), j.setting("INSTALLER_VERSION"))
	if err != nil {
		return catalog.Result{}, err
	}
	// The installer is verified into the cache before anything is written
	// into the root, so a bad one leaves the root as it was.
	if err := i.prefetch(ctx, rel.Installer); err != nil {
		return catalog.Result{}, err
	}
	m, err := i.mojangServer(ctx, j, rel.Game, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	res, err := i.runInstaller(ctx, j, rel.Installer, "quilt", "", "install", "server", rel.Game, rel.Loader, "--install-dir=.")
	if err != nil {
		return catalog.Result{}, err
	}
	if _, err := j.root.Stat(quiltLauncher); errors.Is(err, fs.ErrNotExist) {
		return catalog.Result{}, fmt.Errorf("the quilt installer finished but left no %s", quiltLauncher)
	} else if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor, res.Jar = rel.Game, rel.Loader, m.java, quiltLauncher
	return res, nil
}

// prefetch makes sure a is in the cache, downloading and verifying it if
// not, without writing anything into a root.
func (i *Installer) prefetch(ctx context.Context, a upstream.Artifact) error {
	if _, ok := i.cache.find(ctx, a); ok {
		return nil
	}
	_, err := i.download(ctx, a)
	return err
}
