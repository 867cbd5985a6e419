package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
)

// quiltBase is Quilt's metadata service (v3).
const quiltBase = "https://meta.quiltmc.org/v3"

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
//
// "latest" is the newest stable game version Quilt's meta lists
// ("snapshot": the newest of any kind), LOADER_VERSION "latest" the newest
// loader without a pre-release suffix (Quilt's loader list has no stable
// flag; betas are named 0.x.y-beta.n), INSTALLER_VERSION "latest" likewise
// the newest installer.
func (i *Installer) quilt(ctx context.Context, j job) (catalog.Result, error) {
	game, err := i.quiltGame(ctx, j.version)
	if err != nil {
		return catalog.Result{}, err
	}
	var loaders []struct {
		Version string `json:"version"`
	}
	if err := i.fetch.json(ctx, quiltBase+"/versions/loader", &loaders); err != nil {
		return catalog.Result{}, err
	}
	loader := j.setting("LOADER_VERSION")
	if loader, err = quiltPick(loader, "loader", func(yield func(string) bool) {
		for _, l := range loaders {
			if !yield(l.Version) {
				return
			}
		}
	}); err != nil {
		return catalog.Result{}, err
	}
	var installers []struct {
		URL     string `json:"url"`
		Version string `json:"version"`
	}
	if err := i.fetch.json(ctx, quiltBase+"/versions/installer", &installers); err != nil {
		return catalog.Result{}, err
	}
	instVersion, err := quiltPick(j.setting("INSTALLER_VERSION"), "installer", func(yield func(string) bool) {
		for _, l := range installers {
			if !yield(l.Version) {
				return
			}
		}
	})
	if err != nil {
		return catalog.Result{}, err
	}
	var instURL string
	for _, in := range installers {
		if in.Version == instVersion {
			instURL = in.URL
		}
	}
	if u, err := url.Parse(instURL); err != nil || u.Scheme != "https" || !strings.HasSuffix(u.Path, ".jar") {
		return catalog.Result{}, fmt.Errorf("quilt installer %s: meta gives no https jar url (%q)", instVersion, instURL)
	}
	inst, err := i.mavenInstaller(ctx, instURL)
	if err != nil {
		return catalog.Result{}, err
	}
	// The installer is verified into the cache before anything is written
	// into the root, so a bad one leaves the root as it was.
	if err := i.prefetch(ctx, artifact{URL: inst.URL, Sums: map[string]string{inst.Algo: inst.Sum}}); err != nil {
		return catalog.Result{}, err
	}
	m, err := i.mojangServer(ctx, j, game, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	res, err := i.runInstaller(ctx, j, inst, "quilt", "", "install", "server", game, loader, "--install-dir=.")
	if err != nil {
		return catalog.Result{}, err
	}
	if _, err := j.root.Stat(quiltLauncher); errors.Is(err, fs.ErrNotExist) {
		return catalog.Result{}, fmt.Errorf("the quilt installer finished but left no %s", quiltLauncher)
	} else if err != nil {
		return catalog.Result{}, err
	}
	res.Version, res.Build, res.JavaMajor, res.Jar = game, loader, m.java, quiltLauncher
	return res, nil
}

// quiltGame resolves the game version against Quilt's meta: "latest" is
// the first stable entry, "snapshot" the first entry.
func (i *Installer) quiltGame(ctx context.Context, want string) (string, error) {
	var list []fabricVersion
	if err := i.fetch.json(ctx, quiltBase+"/versions/game", &list); err != nil {
		return "", err
	}
	if want == "snapshot" && len(list) > 0 {
		return list[0].Version, nil
	}
	for _, v := range list {
		if want == "latest" && v.Stable || v.Version == want {
			return v.Version, nil
		}
	}
	if want == "latest" {
		return "", notFound("quilt lists no stable game version")
	}
	return "", notFound("quilt has no game version %s", want)
}

// quiltPick resolves a loader or installer version from a newest-first
// list: "latest" is the first one without a pre-release suffix; any other
// value must be listed.
func quiltPick(want, kind string, list func(func(string) bool)) (string, error) {
	for v := range list {
		if want == "latest" && !strings.Contains(v, "-") || v == want {
			if !validToken(v) {
				return "", fmt.Errorf("quilt %s version %q from upstream is not a version", kind, v)
			}
			return v, nil
		}
	}
	if want == "latest" {
		return "", notFound("quilt lists no %s release", kind)
	}
	return "", notFound("quilt has no %s version %s", kind, want)
}

// prefetch makes sure a is in the cache, downloading and verifying it if
// not, without writing anything into a root.
func (i *Installer) prefetch(ctx context.Context, a artifact) error {
	if _, ok := i.cache.find(ctx, a); ok {
		return nil
	}
	_, err := i.download(ctx, a)
	return err
}
