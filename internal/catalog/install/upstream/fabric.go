package upstream

import (
	"context"
	"fmt"
	"net/url"
)

// fabricBase is Fabric's metadata service (v2).
const fabricBase = "https://meta.fabricmc.net/v2"

type fabricVersion struct {
	Version string `json:"version"`
	Stable  bool   `json:"stable"`
}

// FabricRelease is a game version, the loader and installer versions for
// it, and the server launcher meta builds for the three. Fabric publishes
// no checksum of the launcher: Launcher.Sums is empty.
type FabricRelease struct {
	Game, Loader, Installer string
	Launcher                Artifact
}

// Fabric resolves the game version, the loader (among those meta lists for
// the game) and the installer ("latest": the first stable entry of each;
// "snapshot", game only: the first entry).
func Fabric(ctx context.Context, f *Fetcher, game, loader, installer string) (FabricRelease, error) {
	game, err := fabricPick(ctx, f, "game", game)
	if err != nil {
		return FabricRelease{}, err
	}
	loader, err = fabricLoader(ctx, f, game, loader)
	if err != nil {
		return FabricRelease{}, err
	}
	inst, err := fabricPick(ctx, f, "installer", installer)
	if err != nil {
		return FabricRelease{}, err
	}
	src := fabricBase + "/versions/loader/" + url.PathEscape(game) + "/" + url.PathEscape(loader) + "/" +
		url.PathEscape(inst) + "/server/jar"
	return FabricRelease{Game: game, Loader: loader, Installer: inst, Launcher: Artifact{URL: src}}, nil
}

// fabricPick resolves a game, loader or installer version: "latest" is the
// first stable entry of the list (newest first); "snapshot" (game only) is
// the first entry whatever its stability, as Mojang's latest.snapshot is
// the newest version of any kind; any other value must be listed.
func fabricPick(ctx context.Context, f *Fetcher, kind, want string) (string, error) {
	var list []fabricVersion
	if err := f.JSON(ctx, fabricBase+"/versions/"+kind, &list); err != nil {
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
func fabricLoader(ctx context.Context, f *Fetcher, game, want string) (string, error) {
	var list []struct {
		Loader fabricVersion `json:"loader"`
	}
	if err := f.JSON(ctx, fabricBase+"/versions/loader/"+url.PathEscape(game), &list); err != nil {
		return "", err
	}
	for _, v := range list {
		if want == "latest" && v.Loader.Stable || v.Loader.Version == want {
			if !ValidToken(v.Loader.Version) {
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
