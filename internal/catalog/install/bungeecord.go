package install

import (
	"context"
	"net/http"
	"strconv"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/validate"
)

// bungeeJob is BungeeCord's Jenkins job on md_5's CI.
const bungeeJob = "https://ci.md-5.net/job/BungeeCord/"

// bungeeTree asks Jenkins for only the fields used.
const bungeeTree = "api/json?tree=number,result,artifacts[fileName,relativePath],fingerprint[fileName,hash]"

// bungeecord installs BungeeCord from its Jenkins: "latest" is
// lastSuccessfulBuild, any other version is a build number. The build is
// read first and the jar then fetched from that numbered build, so a build
// finishing meanwhile does not change what is installed.
//
// Checksums: BungeeCord publishes none. When Jenkins recorded a fingerprint
// of the jar (an MD5) it is verified; otherwise Result.Checksum is empty
// and SHA256 is only what Kiln computed over the HTTPS download.
func (i *Installer) bungeecord(ctx context.Context, j job) (catalog.Result, error) {
	ref := "lastSuccessfulBuild"
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
		Fingerprint []struct {
			FileName string `json:"fileName"`
			Hash     string `json:"hash"`
		} `json:"fingerprint"`
	}
	if err := i.fetch.json(ctx, bungeeJob+ref+"/"+bungeeTree, &build); err != nil {
		if isStatus(err, http.StatusNotFound) {
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
	for _, f := range build.Fingerprint {
		if f.FileName == "BungeeCord.jar" && isHex(f.Hash, 32) {
			a.Sums = map[string]string{"md5": f.Hash}
		}
	}
	sha, err := i.artifactInto(ctx, j, a, "server.jar")
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{
		Version: n, Build: n, JavaMajor: j.p.JavaFor(n), Jar: "server.jar",
		SHA256: sha, Source: a.URL, Checksum: a.strongest(),
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
