package docker

import (
	"archive/tar"
	"bytes"
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
	exe, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read %s: %w", bin, err)
	}
	sum := sha256.Sum256(exe)
	digest := hex.EncodeToString(sum[:])
	if im, err := d.cli.ImageInspect(ctx, tag); err == nil {
		if im.Config != nil && im.Config.Labels[LabelBinary] == digest {
			return nil
		}
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", tag, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY kiln " + KilnImageBinary + "\n")},
		{"kiln", 0o755, exe},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: now}); err != nil {
			return fmt.Errorf("build image %s: %w", tag, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("build image %s: %w", tag, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	res, err := d.cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		Labels: map[string]string{LabelManaged: "true", LabelBinary: digest},
	})
	if err != nil {
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
	return nil
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
