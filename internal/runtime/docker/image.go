package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// KilnTestImage is the image of the kiln-test profile: kiln itself FROM
// scratch, run as `/kiln testserver`.
const KilnTestImage = "kiln/testserver:dev"

// KilnImageBinary is where the kiln binary sits inside KilnTestImage.
const KilnImageBinary = "/kiln"

// LabelBinary records, on a kiln image, the SHA-256 of the kiln binary in it.
const LabelBinary = "kiln.binary.sha256"

// EnsureKilnImage builds tag FROM scratch around the kiln binary at bin
// (placed at KilnImageBinary) unless the engine already has it with the
// same binary (label LabelBinary): an upgraded kiln rebuilds it, so dev
// servers never run a stale binary. It is built, never pulled, so
// development mode works offline. bin must be statically linked: a scratch
// image has no C library (build with CGO_ENABLED=0).
func (d *Docker) EnsureKilnImage(ctx context.Context, tag, bin string) error {
	if err := checkStatic(bin); err != nil {
		return err
	}
	// Hash by streaming: the binary is ~30 MB, and holding it (twice, with
	// the build context) would stay in kiln's RSS until the next GC.
	digest, size, err := fileDigest(bin)
	if err != nil {
		return err
	}
	var previous string
	if im, err := d.cli.ImageInspect(ctx, tag); err == nil {
		if im.Config != nil && im.Config.Labels[LabelBinary] == digest {
			return nil
		}
		if im.Config != nil && im.Config.Labels[LabelManaged] == "true" {
			previous = im.ID
		}
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", tag, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, bin, size)) }()
	res, err := d.cli.ImageBuild(ctx, pr, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		Labels: map[string]string{LabelManaged: "true", LabelBinary: digest},
	})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("build image %s: read output: %w", tag, err)
		}
		if m.Error != nil {
			return fmt.Errorf("build image %s: %s", tag, m.Error.Message)
		}
	}
	d.log.Info("built image", "image", tag, "from", bin)
	if previous != "" {
		// The old image of the tag is now dangling; remove it unless a
		// container still uses it (then the engine refuses, and it stays).
		if _, err := d.cli.ImageRemove(ctx, previous, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			d.log.Debug("keep the previous kiln image", "image", previous, "err", err)
		}
	}
	return nil
}

// fileDigest is the SHA-256 (hex) and size of a file, read as a stream.
func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeContext streams the build context: the Dockerfile and the binary.
func writeContext(w io.Writer, bin string, size int64) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	df := []byte("FROM scratch\nCOPY kiln " + KilnImageBinary + "\n")
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(df); err != nil {
		return err
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Name: "kiln", Mode: 0o755, Size: size, ModTime: now}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, size); err != nil {
		return err
	}
	return tw.Close()
}

// checkStatic refuses a dynamically linked binary, which would fail in a
// scratch image with a confusing "no such file or directory".
func checkStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("read %s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; a scratch image needs a static build (CGO_ENABLED=0 go build ./cmd/kiln)", bin)
		}
	}
	return nil
}

// handOver makes the server root belong to the container user, when kiln
// runs as root and the container user is another: kiln (root) can still
// manage every file, and the game server can write its world. Symlinks are
// changed themselves (lchown), never followed.
func (d *Docker) handOver(root string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uidS, gidS, _ := strings.Cut(d.user, ":")
	uid, _ := strconv.Atoi(uidS)
	gid, _ := strconv.Atoi(gidS)
	if uid == 0 {
		return nil
	}
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if st, ok := statOwner(e); ok && st.Uid == uint32(uid) && st.Gid == uint32(gid) {
			return nil
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("give %s to %d:%d: %w", p, uid, gid, err)
		}
		return nil
	})
}

func statOwner(e fs.DirEntry) (*syscall.Stat_t, bool) {
	fi, err := e.Info()
	if err != nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}
