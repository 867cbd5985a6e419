package install

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// artifact is one file to fetch: its upstream URL and every checksum the
// upstream publishes for it (algorithm → lower-case hex).
type artifact struct {
	URL  string
	Size int64 // 0 when not published
	Sums map[string]string
}

// strongest returns the strongest published checksum algorithm, "" for
// none.
func (a artifact) strongest() string {
	for _, algo := range []string{"sha256", "sha1", "md5"} {
		if a.Sums[algo] != "" {
			return algo
		}
	}
	return ""
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "sha256":
		return sha256.New()
	case "sha1":
		return sha1.New()
	case "md5":
		return md5.New()
	}
	return nil
}

// errCorrupt reports a cached blob whose content no longer matches its name.
var errCorrupt = errors.New("cached blob is corrupt")

// cache is the content-addressed store of artifacts shared by every
// server:
//
//	<dir>/sha256/<hex>           the artifact whose SHA-256 is <hex>
//	<dir>/index/<algo>/<hex>     holds the SHA-256 hex of the artifact whose
//	                             upstream sha1/md5 checksum is <hex>; for
//	                             artifacts without a checksum, algo "url" and
//	                             <hex> = SHA-256 of the upstream URL
//	<dir>/tmp/                   downloads in progress
//
// A blob appears under sha256/ only by rename, after its content matched
// every published checksum and was synced, so a reader never sees a partial
// or unverified blob and a bad download never poisons the cache.
type cache struct {
	dir string
}

func (c cache) blobPath(sum string) string { return filepath.Join(c.dir, "sha256", sum) }

func (c cache) indexPath(algo, sum string) string {
	return filepath.Join(c.dir, "index", algo, sum)
}

// indexKey is how an artifact is found in the cache before it is
// downloaded: by the strongest published checksum, else by URL.
func indexKey(a artifact) (algo, sum string) {
	if algo := a.strongest(); algo != "" {
		return algo, strings.ToLower(a.Sums[algo])
	}
	h := sha256.Sum256([]byte(a.URL))
	return "url", hex.EncodeToString(h[:])
}

// find returns the SHA-256 of a cached copy of a, if any.
func (c cache) find(a artifact) (string, bool) {
	algo, sum := indexKey(a)
	if algo == "sha256" {
		if !isHex(sum, 64) {
			return "", false
		}
		_, err := os.Stat(c.blobPath(sum))
		return sum, err == nil
	}
	data, err := os.ReadFile(c.indexPath(algo, sum))
	if err != nil {
		return "", false
	}
	sha := strings.TrimSpace(string(data))
	if !isHex(sha, 64) {
		return "", false
	}
	if _, err := os.Stat(c.blobPath(sha)); err != nil {
		return "", false
	}
	return sha, true
}

// forget removes a corrupt blob so the next install downloads it again.
func (c cache) forget(sha string) {
	_ = os.Remove(c.blobPath(sha))
}

// download fetches a into the cache, verifying its size and every published
// checksum, and returns its SHA-256. On any failure nothing is left behind.
func (i *Installer) download(ctx context.Context, a artifact) (string, error) {
	c := i.cache
	tmpDir := filepath.Join(c.dir, "tmp")
	for _, d := range []string{tmpDir, filepath.Join(c.dir, "sha256")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return "", fmt.Errorf("cache: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	resp, err := i.fetch.do(ctx, http.MethodGet, a.URL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.ContentLength > i.artifactMax {
		return "", fmt.Errorf("%s: %d bytes: %w", a.URL, resp.ContentLength, ErrTooLarge)
	}

	tmp, err := os.CreateTemp(tmpDir, "download-*")
	if err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	hashes := map[string]hash.Hash{"sha256": sha256.New()}
	for algo := range a.Sums {
		if h := newHash(algo); h != nil {
			hashes[algo] = h
		}
	}
	writers := []io.Writer{tmp}
	for _, h := range hashes {
		writers = append(writers, h)
	}
	n, err := io.Copy(io.MultiWriter(writers...), io.LimitReader(resp.Body, i.artifactMax+1))
	if err != nil {
		return "", fmt.Errorf("download %s: %w", a.URL, err)
	}
	if n > i.artifactMax {
		return "", fmt.Errorf("%s: more than %d bytes: %w", a.URL, i.artifactMax, ErrTooLarge)
	}
	if a.Size > 0 && n != a.Size {
		return "", &ChecksumError{URL: a.URL, Algo: "size", Want: fmt.Sprint(a.Size), Got: fmt.Sprint(n)}
	}
	for _, algo := range slices.Sorted(maps.Keys(a.Sums)) {
		want := strings.ToLower(strings.TrimSpace(a.Sums[algo]))
		h, ok := hashes[algo]
		if !ok {
			continue
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return "", &ChecksumError{URL: a.URL, Algo: algo, Want: want, Got: got}
		}
	}
	sha := hex.EncodeToString(hashes["sha256"].Sum(nil))
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.blobPath(sha)); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	renamed = true
	syncDir(filepath.Join(c.dir, "sha256"))

	if algo, sum := indexKey(a); algo != "sha256" {
		if err := c.remember(algo, sum, sha); err != nil {
			return "", err
		}
	}
	return sha, nil
}

// remember writes an index entry atomically.
func (c cache) remember(algo, sum, sha string) error {
	dir := filepath.Join(c.dir, "index", algo)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(sha + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("cache index: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("cache index: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.indexPath(algo, sum)); err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	syncDir(dir)
	return nil
}

// place copies the cached blob sha into the root as name: through a
// temporary file in the root, synced, then renamed, so name is either the
// old file or the whole new one. The copy is hashed on the way and
// errCorrupt is returned (and the blob dropped) if it does not match.
func (i *Installer) place(root *os.Root, name, sha string) error {
	src, err := os.Open(i.cache.blobPath(sha))
	if err != nil {
		return fmt.Errorf("open cached %s: %w", sha, err)
	}
	defer src.Close()
	h := sha256.New()
	err = writeRoot(root, name, 0o644, func(w io.Writer) error {
		_, err := io.Copy(io.MultiWriter(w, h), src)
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sha {
			i.cache.forget(sha)
			return fmt.Errorf("%s has sha256 %s: %w", sha, got, errCorrupt)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	return nil
}

// writeRoot writes name inside root atomically: fill writes a temporary
// file that is synced and renamed over name only when fill succeeded.
// Going through os.Root keeps every write inside the server root even if a
// user planted symlinks there; rename replaces a symlink, never follows it.
func writeRoot(root *os.Root, name string, perm fs.FileMode, fill func(io.Writer) error) error {
	if dir := filepath.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	tmp := filepath.Join(filepath.Dir(name), ".kiln-"+rand.Text()+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	ok = true
	return nil
}

// syncDir makes a rename in dir durable. Failure only weakens durability
// (some filesystems refuse to sync a directory), so it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
