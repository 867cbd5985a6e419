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
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
)

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
// server, kept in a blob store (package blob: a local directory, or the
// S3 bucket of --blob-url, which replicas then share) under prefix:
//
//	<prefix>sha256/<hex>          the artifact whose SHA-256 is <hex>
//	<prefix>index/<algo>/<hex>    holds the SHA-256 hex of the artifact whose
//	                              upstream sha1/md5 checksum is <hex>; for
//	                              artifacts without a checksum, algo "url" and
//	                              <hex> = SHA-256 of the upstream URL
//
// Downloads in progress are staged in tmpDir, a local directory. A blob is
// put under sha256/ only after its content matched every published
// checksum, and the store never shows a half-written blob (blob.Store.Put),
// so a reader never sees a partial or unverified artifact and a bad
// download never poisons the cache.
type cache struct {
	store  blob.Store
	prefix string
	tmpDir string
}

func (c cache) blobKey(sum string) string { return c.prefix + "sha256/" + sum }

func (c cache) indexKey(algo, sum string) string { return c.prefix + "index/" + algo + "/" + sum }

// openArtifacts returns the store of the artifact cache: opts.Artifacts, or
// a file blob store in opts.CacheDir. It also removes what older versions
// of Kiln kept in CacheDir (sha256/, index/ and tmp/ at its top, before
// the cache moved onto the blob layer), which nothing reads any more, and
// the downloads a crash cut short.
func openArtifacts(opts Options) (blob.Store, error) {
	for _, old := range []string{"sha256", "index", "tmp", "~downloads"} {
		if err := os.RemoveAll(filepath.Join(opts.CacheDir, old)); err != nil {
			return nil, fmt.Errorf("installer: clean the cache directory: %w", err)
		}
	}
	if opts.Artifacts != nil {
		return opts.Artifacts, nil
	}
	dir, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("installer: cache directory: %w", err)
	}
	st, err := blob.Open(context.Background(), "file://"+dir, blob.Options{CleanBefore: time.Now()})
	if err != nil {
		return nil, fmt.Errorf("installer: open the artifact cache: %w", err)
	}
	return st, nil
}

// indexKey is how an artifact is found in the cache before it is
// downloaded: by the strongest published checksum, else by URL.
func indexKey(a upstream.Artifact) (algo, sum string) {
	if algo := a.Strongest(); algo != "" {
		return algo, strings.ToLower(a.Sums[algo])
	}
	h := sha256.Sum256([]byte(a.URL))
	return "url", hex.EncodeToString(h[:])
}

// find returns the SHA-256 of a cached copy of a, if any. A checksum that
// is no valid hex (an upstream's typo) is simply not found: the download
// then fails its verification.
func (c cache) find(ctx context.Context, a upstream.Artifact) (string, bool) {
	algo, sum := indexKey(a)
	if algo == "sha256" {
		if !upstream.IsHex(sum, 64) {
			return "", false
		}
		_, err := c.store.Stat(ctx, c.blobKey(sum))
		return sum, err == nil
	}
	if !upstream.IsHex(sum, len(sum)) || sum == "" {
		return "", false
	}
	sha, err := c.indexed(ctx, algo, sum)
	if err != nil || !upstream.IsHex(sha, 64) {
		return "", false
	}
	if _, err := c.store.Stat(ctx, c.blobKey(sha)); err != nil {
		return "", false
	}
	return sha, true
}

// indexed reads an index entry.
func (c cache) indexed(ctx context.Context, algo, sum string) (string, error) {
	rc, err := c.store.Get(ctx, c.indexKey(algo, sum))
	if err != nil {
		return "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 256))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// forget removes a corrupt blob so the next install downloads it again.
func (c cache) forget(ctx context.Context, sha string) {
	_ = c.store.Delete(ctx, c.blobKey(sha))
}

// download fetches a into the cache, verifying its size and every published
// checksum, and returns its SHA-256. On any failure nothing is left behind.
func (i *Installer) download(ctx context.Context, a upstream.Artifact) (string, error) {
	c := i.cache
	if err := os.MkdirAll(c.tmpDir, 0o750); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, upstream.DownloadTimeout)
	defer cancel()
	resp, err := i.fetch.Do(ctx, http.MethodGet, a.URL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.ContentLength > i.artifactMax {
		return "", fmt.Errorf("%s: %d bytes: %w", a.URL, resp.ContentLength, ErrTooLarge)
	}

	tmp, err := os.CreateTemp(c.tmpDir, "download-*")
	if err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
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
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	// Put is put-if-absent: a concurrent install of the same artifact that
	// stored it first leaves identical bytes (same SHA-256).
	if _, err := c.store.Put(ctx, c.blobKey(sha), tmp, n); err != nil {
		return "", fmt.Errorf("cache %s: %w", a.URL, err)
	}
	if algo, sum := indexKey(a); algo != "sha256" {
		if err := c.remember(ctx, algo, sum, sha); err != nil {
			return "", err
		}
	}
	return sha, nil
}

// remember records that the artifact found by (algo, sum) has SHA-256 sha.
// Blobs are never overwritten, so an entry that says something else (a
// URL whose content changed, or one pointing at a blob since dropped as
// corrupt) is deleted and written again; a racing install writing the
// same entry at once is harmless.
func (c cache) remember(ctx context.Context, algo, sum, sha string) error {
	key := c.indexKey(algo, sum)
	if old, err := c.indexed(ctx, algo, sum); err == nil && old != sha {
		if err := c.store.Delete(ctx, key); err != nil {
			return fmt.Errorf("cache index: %w", err)
		}
	}
	line := sha + "\n"
	if _, err := c.store.Put(ctx, key, strings.NewReader(line), int64(len(line))); err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	return nil
}

// place copies the cached blob sha into the root as name: through a
// temporary file in the root, synced, then renamed, so name is either the
// old file or the whole new one. The copy is hashed on the way and
// errCorrupt is returned (and the blob dropped) if it does not match.
func (i *Installer) place(ctx context.Context, root *os.Root, name, sha string) error {
	src, err := i.cache.store.Get(ctx, i.cache.blobKey(sha))
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
			i.cache.forget(ctx, sha)
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
