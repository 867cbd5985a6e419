package install

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
)

// mojangManifest lists every Minecraft version (piston-meta).
const mojangManifest = "https://piston-meta.mojang.com/mc/game/version_manifest_v2.json"

// vanilla installs Mojang's server jar as server.jar.
func (i *Installer) vanilla(ctx context.Context, j job) (catalog.Result, error) {
	m, err := i.mojangServer(ctx, j, j.version, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: m.version, JavaMajor: m.java, Jar: "server.jar",
		SHA256: m.sha256, Source: m.url, Checksum: "sha1",
	}, nil
}

type mojangInstall struct {
	version string
	java    int
	sha256  string
	url     string
}

// mojangServer resolves version ("latest" = latest.release, "snapshot" =
// latest.snapshot) in the
// manifest, fetches the version document and checks it against the sha1
// the manifest gives, then installs downloads.server (sha1 and size
// verified) as name. Java comes from javaVersion.majorVersion, else from
// the profile's table.
func (i *Installer) mojangServer(ctx context.Context, j job, version, name string) (mojangInstall, error) {
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
	if err := i.fetch.json(ctx, mojangManifest, &manifest); err != nil {
		return mojangInstall{}, err
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
		return mojangInstall{}, notFound("the minecraft manifest names no %s version", asked)
	}
	var docURL, docSHA1 string
	for _, v := range manifest.Versions {
		if v.ID == version {
			docURL, docSHA1 = v.URL, strings.ToLower(v.SHA1)
			break
		}
	}
	if docURL == "" {
		return mojangInstall{}, notFound("minecraft has no version %s", version)
	}
	body, err := i.fetch.bytes(ctx, docURL)
	if err != nil {
		return mojangInstall{}, err
	}
	if sum := sha1.Sum(body); docSHA1 == "" || hex.EncodeToString(sum[:]) != docSHA1 {
		return mojangInstall{}, &ChecksumError{URL: docURL, Algo: "sha1", Want: docSHA1, Got: hex.EncodeToString(sum[:])}
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
		return mojangInstall{}, fmt.Errorf("decode %s: %w", docURL, err)
	}
	s := doc.Downloads.Server
	if s == nil || s.URL == "" {
		return mojangInstall{}, notFound("minecraft %s has no server download", version)
	}
	if !isHex(s.SHA1, 40) {
		return mojangInstall{}, fmt.Errorf("minecraft %s: upstream published no sha1", version)
	}
	sha, err := i.artifactInto(ctx, j, artifact{URL: s.URL, Size: s.Size, Sums: map[string]string{"sha1": s.SHA1}}, name)
	if err != nil {
		return mojangInstall{}, err
	}
	java := doc.JavaVersion.MajorVersion
	if java == 0 {
		java = j.p.JavaFor(version)
	}
	return mojangInstall{version: version, java: java, sha256: sha, url: s.URL}, nil
}
