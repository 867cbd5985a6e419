package install

import (
	"context"
	"io"

	"github.com/kilnhq/kiln/internal/catalog"
)

// testserver installs the kiln-test and kiln-test-proxy profiles: the
// bundled `kiln testserver` needs no download, so it only writes a marker
// naming the profile (server.properties is Configure's, before every
// start; velocity.toml the proxy's own, on its first start). It works
// offline.
func (i *Installer) testserver(_ context.Context, j job) (catalog.Result, error) {
	version := j.version
	if version == "latest" {
		version = "dev"
	}
	write := func(name, content string) error {
		return writeRoot(j.root, name, 0o644, func(w io.Writer) error {
			_, err := io.WriteString(w, content)
			return err
		})
	}
	if err := write(".kiln-testserver", j.p.Type+" "+version+"\n"); err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{Version: version}, nil
}
