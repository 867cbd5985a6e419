package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// testStore runs the behaviour every backend shares against the stores
// open returns (a fresh, empty one per call).
func testStore(t *testing.T, open func(t *testing.T) Store) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, open(t)) })
	t.Run("UnknownSize", func(t *testing.T) { testUnknownSize(t, open(t)) })
	t.Run("WrongSize", func(t *testing.T) { testWrongSize(t, open(t)) })
	t.Run("ConcurrentPut", func(t *testing.T) { testConcurrentPut(t, open(t)) })
	t.Run("FailingReader", func(t *testing.T) { testFailingReader(t, open(t)) })
	t.Run("InvalidKeys", func(t *testing.T) { testInvalidKeys(t, open(t)) })
	t.Run("List", func(t *testing.T) { testList(t, open(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, open(t)) })
	t.Run("Canceled", func(t *testing.T) { testCanceled(t, open(t)) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, open(t)) })
	t.Run("Checked", func(t *testing.T) { testChecked(t, open(t)) })
}

// chunkKey is the key the snapshot feature gives data: its sha256.
func chunkKey(data []byte) string {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	return "chunks/" + h[:2] + "/" + h
}

func put(t *testing.T, s Store, key string, data []byte) {
	t.Helper()
	created, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)))
	if err != nil || !created {
		t.Fatalf("Put(%q) = %v, %v, want true, nil", key, created, err)
	}
}

func get(t *testing.T, s Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", key, err)
	}
	return b
}

func wantMissing(t *testing.T, s Store, key string) {
	t.Helper()
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat(%q) error = %v, want ErrNotFound", key, err)
	}
	if rc, err := s.Get(t.Context(), key); !errors.Is(err, ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Get(%q) error = %v, want ErrNotFound", key, err)
	}
}

func listKeys(t *testing.T, s Store, prefix string) []string {
	t.Helper()
	var keys []string
	err := s.List(t.Context(), prefix, func(i Info) error {
		keys = append(keys, i.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	slices.Sort(keys)
	return keys
}

// untouchable fails the test if anything reads it: a Put of an existing
// key must not consume its reader.
type untouchable struct{ t *testing.T }

func (u untouchable) Read([]byte) (int, error) {
	u.t.Error("Put read the reader of a key that already exists")
	return 0, io.EOF
}

func testRoundTrip(t *testing.T, s Store) {
	data := []byte("a chunk of region file")
	key := chunkKey(data)
	wantMissing(t, s, key)
	put(t, s, key, data)
	if got := get(t, s, key); !bytes.Equal(got, data) {
		t.Errorf("Get(%q) = %q, want %q", key, got, data)
	}
	info, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	if info.Key != key || info.Size != int64(len(data)) || info.ModTime.IsZero() {
		t.Errorf("Stat(%q) = %+v, want key %q, size %d and a time", key, info, key, len(data))
	}
	created, err := s.Put(t.Context(), key, untouchable{t}, int64(len(data)))
	if err != nil || created {
		t.Errorf("Put(%q) again = %v, %v, want false, nil", key, created, err)
	}

	// An empty blob is a blob.
	put(t, s, "manifests/empty", nil)
	if got := get(t, s, "manifests/empty"); len(got) != 0 {
		t.Errorf("Get(manifests/empty) = %q, want empty", got)
	}
	// A key at the top, without a directory.
	put(t, s, "top", []byte("x"))
	if got := get(t, s, "top"); string(got) != "x" {
		t.Errorf("Get(top) = %q, want x", got)
	}
}

func testUnknownSize(t *testing.T, s Store) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	created, err := s.Put(t.Context(), "manifests/unknown", bytes.NewReader(data), -1)
	if err != nil || !created {
		t.Fatalf("Put(size -1) = %v, %v, want true, nil", created, err)
	}
	if got := get(t, s, "manifests/unknown"); !bytes.Equal(got, data) {
		t.Errorf("Get after Put(size -1): %d bytes, want %d", len(got), len(data))
	}
}

func testWrongSize(t *testing.T, s Store) {
	for _, tc := range []struct {
		name string
		data string
		size int64
	}{
		{"short", "12345", 6},
		{"long", "1234567", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "manifests/" + tc.name
			created, err := s.Put(t.Context(), key, strings.NewReader(tc.data), tc.size)
			if err == nil || created {
				t.Errorf("Put(%d bytes, size %d) = %v, %v, want an error", len(tc.data), tc.size, created, err)
			}
			wantMissing(t, s, key)
		})
	}
}

func testConcurrentPut(t *testing.T, s Store) {
	data := bytes.Repeat([]byte("same chunk "), 10000)
	key := chunkKey(data)
	var wg sync.WaitGroup
	var createdN atomic.Int32
	for range 16 {
		wg.Go(func() {
			created, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Errorf("Put(%q): %v", key, err)
			}
			if created {
				createdN.Add(1)
			}
		})
	}
	wg.Wait()
	if n := createdN.Load(); n != 1 {
		t.Errorf("16 concurrent Puts of one key: %d created, want exactly 1", n)
	}
	if got := get(t, s, key); !bytes.Equal(got, data) {
		t.Errorf("Get(%q) after concurrent Puts: %d bytes, want %d", key, len(got), len(data))
	}
}

// failingReader gives n bytes, then fails.
type failingReader struct{ n int }

var errReader = errors.New("disk read failed")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errReader
	}
	n := min(len(p), f.n)
	for i := range p[:n] {
		p[i] = 'x'
	}
	f.n -= n
	return n, nil
}

func testFailingReader(t *testing.T, s Store) {
	for _, size := range []int64{100000, -1} {
		t.Run(fmt.Sprint("size", size), func(t *testing.T) {
			key := fmt.Sprint("manifests/failing", size)
			created, err := s.Put(t.Context(), key, &failingReader{n: 50000}, size)
			if !errors.Is(err, errReader) || created {
				t.Errorf("Put(failing reader) = %v, %v, want false, an error wrapping %v", created, err, errReader)
			}
			wantMissing(t, s, key)
			if keys := listKeys(t, s, key); len(keys) != 0 {
				t.Errorf("List after a failed Put = %q, want nothing", keys)
			}
			// The key stays free for a Put that succeeds.
			put(t, s, key, []byte("later"))
		})
	}
}

var invalidKeys = map[string]string{
	"empty":          "",
	"leading slash":  "/chunks/ab",
	"trailing slash": "chunks/ab/",
	"double slash":   "chunks//ab",
	"dot":            "chunks/./ab",
	"dotdot":         "chunks/../../etc/passwd",
	"only dotdot":    "..",
	"ends in dotdot": "chunks/..",
	"upper case":     "Chunks/ab",
	"space":          "chunks/a b",
	"backslash":      `chunks\ab`,
	"non ascii":      "chunks/é",
	"nul":            "chunks/a\x00",
	"too long":       strings.Repeat("a", MaxKeyLen+1),
	"tilde":          "~tmp/put",
}

func testInvalidKeys(t *testing.T, s Store) {
	ctx := t.Context()
	for name, key := range invalidKeys {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Put(ctx, key, untouchable{t}, 0); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Put(%q) error = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Get(%q) error = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Stat(%q) error = %v, want ErrInvalidKey", key, err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Delete(%q) error = %v, want ErrInvalidKey", key, err)
			}
		})
	}
	for _, prefix := range []string{"../", "chunks/../", "/chunks", "chunks//", "Chunks"} {
		if err := s.List(ctx, prefix, func(Info) error { return nil }); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("List(%q) error = %v, want ErrInvalidKey", prefix, err)
		}
	}
	for _, key := range []string{"a", ".a", "a..b", "-_.", "chunks/.hidden", strings.Repeat("z/", 490) + "zz"} {
		put(t, s, key, []byte(key))
		if got := get(t, s, key); string(got) != key {
			t.Errorf("Get(%q) = %q, want the key", key, got)
		}
	}
}

func testList(t *testing.T, s Store) {
	keys := []string{
		"chunks/aa/aa01", "chunks/aa/aa02", "chunks/ab/ab01", "chunks/b0/b001",
		"manifests/m1", "manifests/m2", "manifestsx", "top",
	}
	for _, k := range keys {
		put(t, s, k, []byte(k+" data"))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", keys},
		{"chunks/", keys[:4]},
		{"chunks/a", keys[:3]},
		{"chunks/aa/", keys[:2]},
		{"chunks/aa/aa02", keys[1:2]},
		{"chunks/aa", keys[:2]},
		{"manifests", keys[4:7]},
		{"manifests/", keys[4:6]},
		{"t", keys[7:]},
		{"nothing/", nil},
		{"chunks/zz/", nil},
		{"chunks/aa/aa01/", nil},
	} {
		if got := listKeys(t, s, tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}

	var info Info
	err := s.List(t.Context(), "manifests/m1", func(i Info) error { info = i; return nil })
	if err != nil || info.Key != "manifests/m1" || info.Size != int64(len("manifests/m1 data")) || info.ModTime.IsZero() {
		t.Errorf("List(manifests/m1) = %+v, %v, want the key, its size and a time", info, err)
	}

	stop := errors.New("enough")
	calls := 0
	err = s.List(t.Context(), "", func(Info) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("List with fn failing: %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func testDelete(t *testing.T, s Store) {
	if err := s.Delete(t.Context(), "chunks/00/missing"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	put(t, s, "manifests/gone", []byte("x"))
	put(t, s, "manifests/kept", []byte("y"))
	if err := s.Delete(t.Context(), "manifests/gone"); err != nil {
		t.Fatalf("Delete(manifests/gone): %v", err)
	}
	wantMissing(t, s, "manifests/gone")
	if got := listKeys(t, s, "manifests/"); !slices.Equal(got, []string{"manifests/kept"}) {
		t.Errorf("List after Delete = %q, want [manifests/kept]", got)
	}
	if err := s.Delete(t.Context(), "manifests/gone"); err != nil {
		t.Errorf("Delete twice = %v, want nil", err)
	}
	// Deleted, the key can be stored again.
	put(t, s, "manifests/gone", []byte("again"))
	if got := get(t, s, "manifests/gone"); string(got) != "again" {
		t.Errorf("Get after Delete and Put = %q, want again", got)
	}
}

func testCanceled(t *testing.T, s Store) {
	put(t, s, "manifests/here", []byte("x"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "manifests/new", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put(canceled) error = %v, want context.Canceled", err)
	}
	wantMissing(t, s, "manifests/new")
	if _, err := s.Get(ctx, "manifests/here"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(canceled) error = %v, want context.Canceled", err)
	}
	if err := s.List(ctx, "", func(Info) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("List(canceled) error = %v, want context.Canceled", err)
	}
}

// testBatch: blobs put through a batch are all there, whole, once Commit
// returns; a key already stored or already put in the batch is not
// created again; a wrong size fails the Put and stores nothing.
func testBatch(t *testing.T, s Store) {
	ctx := t.Context()
	old := []byte("stored before the batch")
	put(t, s, chunkKey(old), old)
	b := NewBatch(s)
	defer b.Close()
	var blobs [][]byte
	for i := range 20 {
		blobs = append(blobs, bytes.Repeat([]byte{byte(i)}, 1000*i+1))
	}
	var wg sync.WaitGroup
	for _, data := range blobs {
		wg.Go(func() {
			created, err := b.Put(ctx, chunkKey(data), bytes.NewReader(data), int64(len(data)))
			if err != nil || !created {
				t.Errorf("Batch.Put(%d bytes) = %v, %v, want true, nil", len(data), created, err)
			}
		})
	}
	wg.Wait()
	if created, err := b.Put(ctx, chunkKey(blobs[3]), untouchable{t}, int64(len(blobs[3]))); err != nil || created {
		t.Errorf("Batch.Put of a key put in the batch = %v, %v, want false, nil", created, err)
	}
	if created, err := b.Put(ctx, chunkKey(old), untouchable{t}, int64(len(old))); err != nil || created {
		t.Errorf("Batch.Put of a stored key = %v, %v, want false, nil", created, err)
	}
	// A wrong size, through the one-write path and the copying one.
	short := []byte("short")
	if created, err := b.Put(ctx, chunkKey(short), bytes.NewReader(short), 6); err == nil || created {
		t.Errorf("Batch.Put(5 bytes, size 6) = %v, %v, want an error", created, err)
	}
	if created, err := b.Put(ctx, chunkKey(short), strings.NewReader("short+"), 5); err == nil || created {
		t.Errorf("Batch.Put(6 bytes, size 5) = %v, %v, want an error", created, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for _, data := range blobs {
		if got := get(t, s, chunkKey(data)); !bytes.Equal(got, data) {
			t.Errorf("Get(%d-byte blob) after Commit: %d bytes, want it whole", len(data), len(got))
		}
	}
	wantMissing(t, s, chunkKey(short))
	if _, err := b.Put(ctx, chunkKey([]byte("late")), strings.NewReader("late"), 4); err == nil && !isDurableBatch(b) {
		t.Errorf("Batch.Put after Commit succeeded, want an error")
	}
}

func isDurableBatch(b Batch) bool { _, ok := b.(durableBatch); return ok }
