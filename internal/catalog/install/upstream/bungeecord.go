package upstream

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// bungeeJob is BungeeCord's Jenkins job on md_5's CI.
const bungeeJob = "https://ci.md-5.net/job/BungeeCord/"

// bungeeTree asks Jenkins for only the fields used.
const bungeeTree = "api/json?tree=number,result,artifacts[fileName,relativePath]"

// bungeeFingerprintTree asks the Fingerprint record for its hash.
const bungeeFingerprintTree = "api/json?tree=hash,fileName"

// BungeeCord resolves a BungeeCord build on its Jenkins: "latest" is
// lastStableBuild (lastSuccessfulBuild may be UNSTABLE), any other version
// is a build number, which must have succeeded. The build is read first
// and the jar then fetched from that numbered build, so a build finishing
// meanwhile does not change what is installed. Build and Version are the
// build number; the jar carries the MD5 Jenkins computed of it.
//
// Checksums: BungeeCord publishes none of its own. The build's
// fingerprint[] list is no substitute: BungeeCord is a Maven job, whose
// fingerprints are named "<groupId>:<file>" (net.md-5:BungeeCord.jar) and
// taken of what Maven installed, before the bootstrap jar is shaded, so
// they do not match the archived jar. The jar is verified instead against
// the MD5 Jenkins computes of the archived file itself: the artifact's
// "*fingerprint*" URL makes Jenkins digest that file and answer with the
// Fingerprint record of that MD5 (hudson.model.DirectoryBrowserSupport).
// A build whose jar has no fingerprint record is refused, never installed
// unverified.
func BungeeCord(ctx context.Context, f *Fetcher, version string) (Release, error) {
	ref := "lastStableBuild"
	if version != "latest" {
		if n, err := strconv.Atoi(version); err != nil || n <= 0 {
			return Release{}, validate.Errorf("version", "%q is not a BungeeCord build number (or latest)", version)
		}
		ref = version
	}
	var build struct {
		Number    int    `json:"number"`
		Result    string `json:"result"`
		Artifacts []struct {
			FileName     string `json:"fileName"`
			RelativePath string `json:"relativePath"`
		} `json:"artifacts"`
	}
	if err := f.JSON(ctx, bungeeJob+ref+"/"+bungeeTree, &build); err != nil {
		if IsStatus(err, http.StatusNotFound) {
			if ref == "lastStableBuild" {
				return Release{}, notFound("bungeecord has no stable build")
			}
			return Release{}, notFound("bungeecord has no build %s", version)
		}
		return Release{}, err
	}
	if build.Result != "SUCCESS" {
		return Release{}, notFound("bungeecord build %d did not succeed (%s)", build.Number, build.Result)
	}
	var rel string
	for _, a := range build.Artifacts {
		if a.FileName == "BungeeCord.jar" {
			rel = a.RelativePath
		}
	}
	if rel == "" || !validPath(rel) {
		return Release{}, notFound("bungeecord build %d has no BungeeCord.jar", build.Number)
	}
	n := strconv.Itoa(build.Number)
	a := Artifact{URL: bungeeJob + n + "/artifact/" + rel}
	var fp struct {
		Hash     string `json:"hash"`
		FileName string `json:"fileName"`
	}
	err := f.JSON(ctx, a.URL+"/*fingerprint*/"+bungeeFingerprintTree, &fp)
	if IsStatus(err, http.StatusNotFound) || err == nil && !IsHex(strings.ToLower(fp.Hash), 32) {
		return Release{}, fmt.Errorf("bungeecord build %d: Jenkins published no fingerprint (MD5) of %s; refusing an unverifiable jar", build.Number, rel)
	}
	if err != nil {
		return Release{}, err
	}
	a.Sums = map[string]string{"md5": strings.ToLower(fp.Hash)}
	return Release{Version: n, Build: n, Jar: a}, nil
}
