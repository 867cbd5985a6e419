package upstream

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// quiltBase is Quilt's metadata service (v3).
const quiltBase = "https://meta.quiltmc.org/v3"

// QuiltRelease is a game version, a loader version and the quilt-installer
// jar (on Quilt's Maven, with the checksum of its sidecar) that installs
// them.
type QuiltRelease struct {
	Game, Loader string
	Installer    Artifact
}

// Quilt resolves the game version ("latest": the newest stable one Quilt's
// meta lists; "snapshot": the newest of any kind), the loader ("latest":
// the newest without a pre-release suffix; Quilt's loader list has no
// stable flag, betas are named 0.x.y-beta.n) and quilt-installer
// (likewise), whose jar must be an https URL with a checksum sidecar.
func Quilt(ctx context.Context, f *Fetcher, game, loader, installer string) (QuiltRelease, error) {
	game, err := quiltGame(ctx, f, game)
	if err != nil {
		return QuiltRelease{}, err
	}
	var loaders []struct {
		Version string `json:"version"`
	}
	if err := f.JSON(ctx, quiltBase+"/versions/loader", &loaders); err != nil {
		return QuiltRelease{}, err
	}
	if loader, err = quiltPick(loader, "loader", func(yield func(string) bool) {
		for _, l := range loaders {
			if !yield(l.Version) {
				return
			}
		}
	}); err != nil {
		return QuiltRelease{}, err
	}
	var installers []struct {
		URL     string `json:"url"`
		Version string `json:"version"`
	}
	if err := f.JSON(ctx, quiltBase+"/versions/installer", &installers); err != nil {
		return QuiltRelease{}, err
	}
	instVersion, err := quiltPick(installer, "installer", func(yield func(string) bool) {
		for _, l := range installers {
			if !yield(l.Version) {
				return
			}
		}
	})
	if err != nil {
		return QuiltRelease{}, err
	}
	var instURL string
	for _, in := range installers {
		if in.Version == instVersion {
			instURL = in.URL
		}
	}
	if u, err := url.Parse(instURL); err != nil || u.Scheme != "https" || !strings.HasSuffix(u.Path, ".jar") {
		return QuiltRelease{}, fmt.Errorf("quilt installer %s: meta gives no https jar url (%q)", instVersion, instURL)
	}
	inst, err := mavenInstaller(ctx, f, instURL)
	if err != nil {
		return QuiltRelease{}, err
	}
	return QuiltRelease{Game: game, Loader: loader, Installer: inst}, nil
}

// quiltGame resolves the game version against Quilt's meta: "latest" is
// the first stable entry, "snapshot" the first entry.
func quiltGame(ctx context.Context, f *Fetcher, want string) (string, error) {
	var list []fabricVersion
	if err := f.JSON(ctx, quiltBase+"/versions/game", &list); err != nil {
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
			if !ValidToken(v) {
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
