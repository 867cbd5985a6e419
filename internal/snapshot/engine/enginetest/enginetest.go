package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// newStore opens a file blob store in a temporary directory.
func newStore(t testing.TB) blob.Store {
	t.Helper()
	s, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatalf("blob.Open: %v", err)
	}
	return s
}

// openRoot opens dir as a server root.
func openRoot(t testing.TB, dir string) *files.Root {
	t.Helper()
	r, err := files.Open(dir)
	if err != nil {
		t.Fatalf("files.Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// tree builds fixtures under a host directory (tests only: the engine
// never sees these paths).
type tree struct {
	t   testing.TB
	dir string
	rnd *rand.ChaCha8
	now time.Time
	n   int
}

func newTree(t testing.TB) *tree {
	return &tree{t: t, dir: t.TempDir(), rnd: rand.NewChaCha8([32]byte{1}),
		now: time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)}
}

// mtime is a distinct past time for each call, with nanoseconds.
func (tr *tree) mtime() time.Time {
	tr.n++
	return tr.now.Add(time.Duration(tr.n)*time.Minute + time.Duration(tr.n*7919)*time.Nanosecond)
}

func (tr *tree) random(n int) []byte {
	b := make([]byte, n)
	_, _ = tr.rnd.Read(b)
	return b
}

func (tr *tree) file(rel string, data []byte, mode fs.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.WriteFile(p, data, mode); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tr.t.Fatal(err)
	}
	m := tr.mtime()
	if err := os.Chtimes(p, m, m); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) mkdir(rel string, mode fs.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) symlink(target, rel string) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
	m := tr.mtime()
	ts := []unix.Timespec{unix.NsecToTimespec(m.UnixNano()), unix.NsecToTimespec(m.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		tr.t.Fatal(err)
	}
}

// stampDirs gives every directory a distinct mtime, deepest first (after
// their content is made).
func (tr *tree) stampDirs() {
	tr.t.Helper()
	var dirs []string
	_ = filepath.WalkDir(tr.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != tr.dir {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, p := range dirs {
		m := tr.mtime()
		if err := os.Chtimes(p, m, m); err != nil {
			tr.t.Fatal(err)
		}
	}
}

// state describes a tree as a restore must reproduce it: every entry's
// kind, mode, mtime, size and content hash or link target. Kiln's
// temporary entries are listed too (none may be left).
func state(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o mtime=%d", st.Mode, unix.TimespecToNsec(st.Mtim))
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			desc += fmt.Sprintf(" size=%d sha=%s", len(data), hex.EncodeToString(sum[:8]))
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			desc = fmt.Sprintf("link mtime=%d -> %s", unix.TimespecToNsec(st.Mtim), target)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("state(%s): %v", dir, err)
	}
	return out
}

// diffState reports the differences between two states, "" when none.
func diffState(want, got map[string]string) string {
	var b strings.Builder
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !wok:
			fmt.Fprintf(&b, "+ %s: %s\n", k, g)
		case !gok:
			fmt.Fprintf(&b, "- %s: %s\n", k, w)
		case w != g:
			fmt.Fprintf(&b, "~ %s:\n    want %s\n    got  %s\n", k, w, g)
		}
	}
	return b.String()
}

// unlimited is a reservation of an account with no practical limit.
func unlimited(t testing.TB) *quota.Reservation {
	t.Helper()
	res, err := quota.NewAccount(1 << 50).Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(res.Release)
	return res
}

// putManifest stores a manifest of entries under a new key, written by
// the engine's own encoder (hostile ones included: it checks nothing).
func putManifest(t testing.TB, store blob.Store, id string, entries ...manifest.Entry) string {
	t.Helper()
	return putManifestVersion(t, store, id, manifest.Version, entries...)
}

// putManifestVersion is putManifest in an older format version.
func putManifestVersion(t testing.TB, store blob.Store, id string, version int, entries ...manifest.Entry) string {
	t.Helper()
	var buf bytes.Buffer
	enc, err := manifest.NewEncoderVersion(&buf, version, manifest.Header{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		if err := enc.Add(&entries[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	key := ManifestKey(id)
	if _, err := store.Put(t.Context(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatal(err)
	}
	return key
}
