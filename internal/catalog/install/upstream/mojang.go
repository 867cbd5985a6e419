package upstream

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// mojangManifest lists every Minecraft version (piston-meta).
const mojangManifest = "https://piston-meta.mojang.com/mc/game/version_manifest_v2.json"

// Mojang resolves version ("latest" = latest.release, "snapshot" =
// latest.snapshot) in the manifest, fetches the version document and
// checks it against the sha1 the manifest gives. The jar is
// downloads.server with its sha1 and size; JavaMajor is
// javaVersion.majorVersion (0 when the document has none).
func Mojang(ctx context.Context, f *Fetcher, version string) (Release, error) {
	var manifest struct {
		Latest struct {
			Release  string `json:"release"`
			Snapshot string `json:"snapshot"`
		} `json:"latest"`
		Versions []struct {
			ID   string `json:"id"`
			URL  string `json:"url"`
			SHA1 string `json:"sha1"`
		} `json:"versions"`
	}
	if err := f.JSON(ctx, mojangManifest, &manifest); err != nil {
		return Release{}, err
	}
	asked := version
	switch version {
	case "latest":
		version = manifest.Latest.Release
	case "snapshot":
		// Mojang's latest.snapshot is the newest version of any kind: it
		// equals latest.release while no snapshot is newer.
		version = manifest.Latest.Snapshot
	}
	if version == "" {
		return Release{}, notFound("the minecraft manifest names no %s version", asked)
	}
	var docURL, docSHA1 string
	for _, v := range manifest.Versions {
		if v.ID == version {
			docURL, docSHA1 = v.URL, strings.ToLower(v.SHA1)
			break
		}
	}
	if docURL == "" {
		return Release{}, notFound("minecraft has no version %s", version)
	}
	body, err := f.Bytes(ctx, docURL)
	if err != nil {
		return Release{}, err
	}
	if sum := sha1.Sum(body); docSHA1 == "" || hex.EncodeToString(sum[:]) != docSHA1 {
		return Release{}, &ChecksumError{URL: docURL, Algo: "sha1", Want: docSHA1, Got: hex.EncodeToString(sum[:])}
	}
	var doc struct {
		Downloads struct {
			Server *struct {
				SHA1 string `json:"sha1"`
				Size int64  `json:"size"`
				URL  string `json:"url"`
			} `json:"server"`
		} `json:"downloads"`
		JavaVersion struct {
			MajorVersion int `json:"majorVersion"`
		} `json:"javaVersion"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return Release{}, fmt.Errorf("decode %s: %w", docURL, err)
	}
	s := doc.Downloads.Server
	if s == nil || s.URL == "" {
		return Release{}, notFound("minecraft %s has no server download", version)
	}
	if !IsHex(s.SHA1, 40) {
		return Release{}, fmt.Errorf("minecraft %s: upstream published no sha1", version)
	}
	return Release{Version: version, JavaMajor: doc.JavaVersion.MajorVersion,
		Jar: Artifact{URL: s.URL, Size: s.Size, Sums: map[string]string{"sha1": s.SHA1}}}, nil
}
