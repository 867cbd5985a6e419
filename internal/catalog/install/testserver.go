package install

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
)

// testserver installs the kiln-test profile: the bundled `kiln testserver`
// needs no download, so it only writes a marker and, when there is none
// yet, a server.properties with the MOTD. It works offline.
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
	if err := write(".kiln-testserver", "kiln-test "+version+"\n"); err != nil {
		return catalog.Result{}, err
	}
	if _, err := j.root.Stat("server.properties"); errors.Is(err, fs.ErrNotExist) {
		props := "# Written by the Kiln installer\n"
		kv := j.p.Properties(j.env)
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			props += k + "=" + strings.ReplaceAll(kv[k], `\`, `\\`) + "\n"
		}
		if err := write("server.properties", props); err != nil {
			return catalog.Result{}, err
		}
	} else if err != nil {
		return catalog.Result{}, err
	}
	return catalog.Result{Version: version}, nil
}
