package install

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

// bungeeJob is BungeeCord's Jenkins job on md_5's CI.
const bungeeJob = "https://ci.md-5.net/job/BungeeCord/"

// bungeeTree asks Jenkins for only the fields used.
const bungeeTree = "api/json?tree=number,result,artifacts[fileName,relativePath]"

// bungeeFingerprintTree asks the Fingerprint record for its hash.
const bungeeFingerprintTree = "api/json?tree=hash,fileName"

// bungeecord installs BungeeCord from its Jenkins: "latest" is
// lastStableBuild (lastSuccessfulBuild may be UNSTABLE), any other version
// is a build number, which must have succeeded. The build is read first
// and the jar then fetched from that numbered build, so a build finishing
// meanwhile does not change what is installed.
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
func (i *Installer) bungeecord(ctx context.Context, j job) (catalog.Result, error) {
	ref := "lastStableBuild"
	if j.version != "latest" {
		if n, err := strconv.Atoi(j.version); err != nil || n <= 0 {
			return catalog.Result{}, validate.Errorf("version", "%q is not a BungeeCord build number (or latest)", j.version)
		}
		ref = j.version
	}
	var build struct {
		Number    int    `json:"number"`
		Result    string `json:"result"`
		Artifacts []struct {
			FileName     string `json:"fileName"`
			RelativePath string `json:"relativePath"`
		} `json:"artifacts"`
	}
	if err := i.fetch.json(ctx, bungeeJob+ref+"/"+bungeeTree, &build); err != nil {
		if isStatus(err, http.StatusNotFound) {
			if ref == "lastStableBuild" {
				return catalog.Result{}, notFound("bungeecord has no stable build")
			}
			return catalog.Result{}, notFound("bungeecord has no build %s", j.version)
		}
		return catalog.Result{}, err
	}
	if build.Result != "SUCCESS" {
		return catalog.Result{}, notFound("bungeecord build %d did not succeed (%s)", build.Number, build.Result)
	}
	var rel string
	for _, a := range build.Artifacts {
		if a.FileName == "BungeeCord.jar" {
			rel = a.RelativePath
		}
	}
	if rel == "" || !validPath(rel) {
		return catalog.Result{}, notFound("bungeecord build %d has no BungeeCord.jar", build.Number)
	}
	n := strconv.Itoa(build.Number)
	a := artifact{URL: bungeeJob + n + "/artifact/" + rel}
	var fp struct {
		Hash     string `json:"hash"`
		FileName string `json:"fileName"`
	}
	err := i.fetch.json(ctx, a.URL+"/*fingerprint*/"+bungeeFingerprintTree, &fp)
	if isStatus(err, http.StatusNotFound) || err == nil && !isHex(strings.ToLower(fp.Hash), 32) {
		return catalog.Result{}, fmt.Errorf("bungeecord build %d: Jenkins published no fingerprint (MD5) of %s; refusing an unverifiable jar", build.Number, rel)
	}
	if err != nil {
		return catalog.Result{}, err
	}
	a.Sums = map[string]string{"md5": strings.ToLower(fp.Hash)}
	sha, err := i.artifactInto(ctx, j, a, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: n, Build: n, JavaMajor: j.p.JavaFor(n), Jar: "server.jar",
		SHA256: sha, Source: a.URL, Checksum: "md5",
	}, nil
}

// validPath reports whether a relative path from an upstream answer is safe
// to put into a URL path: segments of validToken characters.
func validPath(p string) bool {
	if p == "" || p[0] == '/' {
		return false
	}
	start := 0
	for k := 0; k <= len(p); k++ {
		if k == len(p) || p[k] == '/' {
			if !validToken(p[start:k]) {
				return false
			}
			start = k + 1
		}
	}
	return true
}
