package enginetest

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
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/klauspost/compress/zstd"
)

// NewStore opens a file blob store in a temporary directory.
func NewStore(t testing.TB) blob.Store {
	t.Helper()
	s, err := blob.Open(t.Context(), "file://"+t.TempDir(), blob.Options{})
	if err != nil {
		t.Fatalf("blob.Open: %v", err)
	}
	return s
}

// OpenRoot opens dir as a server root.
func OpenRoot(t testing.TB, dir string) *files.Root {
	t.Helper()
	r, err := files.Open(dir)
	if err != nil {
		t.Fatalf("files.Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Tree builds fixtures under a host directory (tests only: the engine
// never sees these paths).
type Tree struct {
	t   testing.TB
	Dir string
	rnd *rand.ChaCha8
	now time.Time
	n   int
}

func NewTree(t testing.TB) *Tree {
	return &Tree{t: t, Dir: t.TempDir(), rnd: rand.NewChaCha8([32]byte{1}),
		now: time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)}
}

// mtime is a distinct past time for each call, with nanoseconds.
func (tr *Tree) Mtime() time.Time {
	tr.n++
	return tr.now.Add(time.Duration(tr.n)*time.Minute + time.Duration(tr.n*7919)*time.Nanosecond)
}

func (tr *Tree) Random(n int) []byte {
	b := make([]byte, n)
	_, _ = tr.rnd.Read(b)
	return b
}

func (tr *Tree) File(rel string, data []byte, mode fs.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.Dir, rel)
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
	m := tr.Mtime()
	if err := os.Chtimes(p, m, m); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *Tree) Mkdir(rel string, mode fs.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.Dir, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *Tree) Symlink(target, rel string) {
	tr.t.Helper()
	p := filepath.Join(tr.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
	m := tr.Mtime()
	ts := []unix.Timespec{unix.NsecToTimespec(m.UnixNano()), unix.NsecToTimespec(m.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		tr.t.Fatal(err)
	}
}

// stampDirs gives every directory a distinct mtime, deepest first (after
// their content is made).
func (tr *Tree) StampDirs() {
	tr.t.Helper()
	var dirs []string
	_ = filepath.WalkDir(tr.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != tr.Dir {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, p := range dirs {
		m := tr.Mtime()
		if err := os.Chtimes(p, m, m); err != nil {
			tr.t.Fatal(err)
		}
	}
}

// State describes a tree as a restore must reproduce it: every entry's
// kind, mode, mtime, size and content hash or link target. Kiln's
// temporary entries are listed too (none may be left).
func State(t testing.TB, dir string) map[string]string {
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

// DiffState reports the differences between two states, "" when none.
func DiffState(want, got map[string]string) string {
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

// Names are the temporary names of the tests' accounts: a fixed key, as
// kiln serve's is fixed by its secret key.
func Names() quota.TempNames { return quota.NewTempNames([]byte("enginetest temporary names key!!")) }

// Unlimited is a reservation of an account with no practical limit.
func Unlimited(t testing.TB) *quota.Reservation {
	t.Helper()
	res, err := quota.NewAccount(1<<50, Names()).Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(res.Release)
	return res
}

// PutManifest stores a manifest of entries under a new key, written by
// the engine's own encoder (hostile ones included: it checks nothing).
func PutManifest(t testing.TB, store blob.Store, id string, entries ...manifest.Entry) string {
	t.Helper()
	return PutManifestVersion(t, store, id, manifest.Version, entries...)
}

// PutManifestVersion is putManifest in an older format version.
func PutManifestVersion(t testing.TB, store blob.Store, id string, version int, entries ...manifest.Entry) string {
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
	key := manifest.Key(id)
	if _, err := store.Put(t.Context(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatal(err)
	}
	return key
}

// Fixture builds a tree with every kind of entry a snapshot records.
func Fixture(t testing.TB) *Tree {
	tr := NewTree(t)
	tr.File("server.properties", []byte("motd=hello\nmax-players=20\n"), 0o644)
	tr.File("empty", nil, 0o600)
	tr.File("start.sh", []byte("#!/bin/sh\nexec java -jar server.jar\n"), 0o755)
	tr.File("world/region/r.0.0.mca", tr.Random(30<<20), 0o644)
	tr.File("world/region/r.0.1.mca", tr.Random(engine.MaxChunk), 0o644)   // exactly one maximal chunk
	tr.File("world/region/r.1.0.mca", tr.Random(2*engine.MaxChunk), 0o644) // cut at the maximum twice
	tr.File("world/level.dat", tr.Random(engine.MinChunk), 0o644)          // exactly the minimal chunk
	tr.File("world/session.lock", tr.Random(engine.MinChunk+1), 0o400)
	for i := range 300 {
		tr.File(fmt.Sprintf("world/playerdata/%04d.dat", i), fmt.Appendf(nil, "player %d %s", i, tr.Random(i)), 0o644)
	}
	tr.Mkdir("plugins/empty", 0o750)
	tr.Mkdir("plugins/Essentials", 0o755)
	tr.File("plugins/Essentials/config.yml", []byte("a: 1\n"), 0o640)
	tr.Symlink("plugins/Essentials/config.yml", "config-link")
	tr.Symlink("../server.properties", "plugins/props")
	tr.Symlink("missing-target", "dangling")
	tr.File("name with spaces & ünïcode\n.txt", []byte("odd name"), 0o644)
	tr.StampDirs()
	return tr
}

// Create is engine.Create, failing the test on an error.
func Create(t testing.TB, root *files.Root, store engine.Store, opts engine.CreateOptions) engine.Result {
	t.Helper()
	res, err := engine.Create(t.Context(), root, store, opts)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return res
}

// Encoder is a zstd encoder at the fastest level, closed when the test ends.
func Encoder(t testing.TB) *zstd.Encoder {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enc.Close() })
	return enc
}

// ChunkOf returns the stored (compressed) form of data and its ref.
func ChunkOf(t testing.TB, data []byte) ([]byte, manifest.ChunkRef) {
	t.Helper()
	return Encoder(t).EncodeAll(data, nil), manifest.ChunkRef{Sum: sha256.Sum256(data), Len: int64(len(data))}
}

// PutChunk stores data as a chunk and returns its ref.
func PutChunk(t testing.TB, store blob.Store, data []byte) manifest.ChunkRef {
	t.Helper()
	comp, ref := ChunkOf(t, data)
	if _, err := store.Put(t.Context(), manifest.ChunkKey("", ref.Sum), bytes.NewReader(comp), int64(len(comp))); err != nil {
		t.Fatal(err)
	}
	return ref
}

// PutLiar stores a chunk under the name of content it does not hold
// ("what it holds!!!!!" under the SHA-256 of "what the name says").
func PutLiar(t testing.TB, store blob.Store) manifest.ChunkRef {
	t.Helper()
	liar := manifest.ChunkRef{Sum: sha256.Sum256([]byte("what the name says")), Len: int64(len("what it holds!!!!!"))}
	comp, _ := ChunkOf(t, []byte("what it holds!!!!!"))
	if _, err := store.Put(t.Context(), manifest.ChunkKey("", liar.Sum), bytes.NewReader(comp), int64(len(comp))); err != nil {
		t.Fatal(err)
	}
	return liar
}
