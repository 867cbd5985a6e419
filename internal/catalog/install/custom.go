package install

import (
	"context"
	"fmt"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
	"github.com/kilnhq/kiln/internal/validate"
)

// custom installs the jar a user names (profile "custom"): JAR_URL,
// fetched through the SSRF guard (Options.UserURLs: the user picks the
// address, so it may be anything, a metadata service or a database port
// included) and never through the mirror, which serves upstreams only;
// verified against JAR_SHA256, which is required: an unverifiable jar is
// never installed. It is downloaded at every install, never taken from
// the cache by its SHA-256: the cache is shared by every team, and a
// team that knows only the hash of another team's private jar (published
// in a build log, say) must not get the jar by naming it. What is
// downloaded still goes into the cache (put-if-absent: stored once). The
// game version is the user's word (it picks the Java).
func (i *Installer) custom(ctx context.Context, j job) (catalog.Result, error) {
	src, sum := j.env["JAR_URL"], strings.ToLower(j.env["JAR_SHA256"])
	if err := catalog.CheckURL(src); err != nil {
		return catalog.Result{}, validate.Errorf("env.JAR_URL", "%v", err)
	}
	if !upstream.IsHex(sum, 64) {
		return catalog.Result{}, validate.Errorf("env.JAR_SHA256", "must be a SHA-256: 64 hexadecimal digits")
	}
	// The guarded fetcher goes through the cache's own download: the same
	// limits, verification and atomic rename, another client.
	guarded := *i
	guarded.fetch = i.userFetch
	sha, err := guarded.placeArtifact(ctx, j, upstream.Artifact{URL: src, Sums: map[string]string{"sha256": sum}}, "server.jar", false)
	if err != nil {
		return catalog.Result{}, fmt.Errorf("custom jar: %w", err)
	}
	return catalog.Result{Version: j.version, JavaMajor: j.p.JavaFor(j.version), Jar: "server.jar",
		SHA256: sha, Source: src, Checksum: "sha256"}, nil
}
