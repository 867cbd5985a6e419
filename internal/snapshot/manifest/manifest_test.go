package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// sample is a tree of every kind of entry, in walk order, whose extents
// exercise each way v2 and v3 name a chunk (a new chunk, the previous
// extent's at another offset, the previous extent's where it ended).
func sample() []Entry {
	a := ChunkRef{Sum: sha256.Sum256([]byte("a")), Len: 100}
	b := ChunkRef{Sum: sha256.Sum256([]byte("b")), Len: 4 << 20}
	return []Entry{
		{Kind: KindDir, Path: "plugins", Mode: 0o755, Mtime: 1_700_000_000_123_456_789},
		{Kind: KindFile, Path: "plugins/a.yml", Mode: 0o644, Mtime: 1_700_000_001_000_000_001, Size: 40,
			Extents: []Extent{{Chunk: a, Off: 0, Len: 40}}, Stat: true, Ctime: 1_700_000_001_000_000_001, Ino: 1000},
		{Kind: KindFile, Path: "plugins/b.yml", Mode: 0o600, Mtime: 1_699_000_000_000_000_000, Size: 60,
			Extents: []Extent{{Chunk: a, Off: 40, Len: 60}}, Stat: true, Ctime: 1_701_000_000_000_000_000, Ino: 998},
		{Kind: KindFile, Path: "plugins/c.yml", Mode: 0o644, Mtime: 5, Size: 10,
			Extents: []Extent{{Chunk: a, Off: 0, Len: 10}}, Stat: true, Ctime: 5, Ino: 1001},
		{Kind: KindLink, Path: "plugins/latest", Mtime: 7, Target: "a.yml"},
		{Kind: KindFile, Path: "world.mca", Mode: 0o644, Mtime: 9, Size: 4<<20 + 100,
			Extents: []Extent{{Chunk: b, Off: 0, Len: 4 << 20}, {Chunk: a, Off: 0, Len: 100}}, Stat: true, Ctime: 9, Ino: 5},
		{Kind: KindFile, Path: "zero", Mode: 0o644, Mtime: 11, Stat: true, Ctime: 11, Ino: 6},
	}
}

func encode(t testing.TB, version int, h Header, entries []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := NewEncoderVersion(&buf, version, h)
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
	return buf.Bytes()
}

func readAll(raw []byte) ([]Entry, Info, error) {
	var got []Entry
	info, err := Read(context.Background(), bytes.NewReader(raw), func(en *Entry) error {
		c := *en
		c.Extents = append([]Extent(nil), en.Extents...)
		if len(c.Extents) == 0 {
			c.Extents = nil
		}
		got = append(got, c)
		return nil
	})
	return got, info, err
}

// TestRoundTrip: what each version writes reads back as written (v1
// without what a later snapshot compares, v1 and v2 without a space),
// with the end record's totals.
func TestRoundTrip(t *testing.T) {
	for _, version := range []int{1, 2, Version} {
		h := Header{Chunker: "fastcdc-v1.0.0/262144/1048576/4194304", Start: 42}
		if version >= 3 {
			h.Space = "team-a"
		}
		want := sample()
		got, info, err := readAll(encode(t, version, h, want))
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		for i := range want {
			if version < 2 {
				want[i].Stat, want[i].Ctime, want[i].Ino = false, 0, 0
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("v%d: read\n%+v\nwant\n%+v", version, got, want)
		}
		wantInfo := Info{Totals: Totals{Entries: 7, Files: 5, Bytes: 40 + 60 + 10 + 4<<20 + 100}, Version: uint64(version), Space: h.Space}
		if version >= 2 {
			wantInfo.Start = 42
		}
		if info != wantInfo {
			t.Errorf("v%d: info %+v, want %+v", version, info, wantInfo)
		}
	}
	if _, err := NewEncoderVersion(io.Discard, 2, Header{Space: "x"}); err == nil {
		t.Error("a v2 manifest with a chunk space was written")
	}
}

// TestRefused: a manifest whose entries a restore must not create, or
// whose format is broken, is ErrInvalid, with the reason.
func TestRefused(t *testing.T) {
	a := ChunkRef{Sum: sha256.Sum256([]byte("a")), Len: 100}
	dir := func(p string) Entry { return Entry{Kind: KindDir, Path: p, Mode: 0o755} }
	file := func(p string, x ...Extent) Entry {
		en := Entry{Kind: KindFile, Path: p, Mode: 0o644, Extents: x}
		for _, e := range x {
			en.Size += e.Len
		}
		return en
	}
	link := func(p, target string) Entry { return Entry{Kind: KindLink, Path: p, Target: target} }
	cases := []struct {
		name    string
		entries []Entry
		reason  string
	}{
		{"dot-dot", []Entry{file("../x")}, "not a clean relative path"},
		{"absolute", []Entry{file("/etc/passwd")}, "not a clean relative path"},
		{"not clean", []Entry{dir("a"), file("a//b")}, "not a clean relative path"},
		{"root", []Entry{dir(".")}, "not a clean relative path"},
		{"temporary name", []Entry{file(".kiln-tmp-x")}, "temporary prefix"},
		{"duplicate", []Entry{file("a"), file("a")}, "duplicate or out of order"},
		{"out of order", []Entry{file("b"), file("a")}, "duplicate or out of order"},
		{"under a file", []Entry{file("a"), file("a/b")}, "not under a directory"},
		{"under nothing", []Entry{file("x/y")}, "not under a directory"},
		{"link out", []Entry{link("l", "../../etc")}, "leads out of the root"},
		{"link absolute", []Entry{link("l", "/etc")}, "leads out of the root"},
		{"link climbs after a name", []Entry{dir("d"), link("d/l", "x/../../..")}, "leads out of the root"},
		{"extent past its chunk", []Entry{file("f", Extent{Chunk: a, Off: 90, Len: 20})}, "an extent of 20 bytes at 90"},
		{"chunk too large", []Entry{file("f", Extent{Chunk: ChunkRef{Sum: a.Sum, Len: MaxChunk + 1}, Len: 1})}, "a chunk of"},
		{"size not the extents'", []Entry{{Kind: KindFile, Path: "f", Size: 5, Extents: []Extent{{Chunk: a, Len: 4}}}}, "extents of 4 bytes for a size of 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := readAll(encode(t, Version, Header{}, c.entries))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("err %v, want ErrInvalid saying %q", err, c.reason)
			}
		})
	}
	allowed := []Entry{dir("d"), link("d/l", "../x"), link("d/m", "sub/file")}
	if _, _, err := readAll(encode(t, Version, Header{}, allowed)); err != nil {
		t.Errorf("links that stay inside refused: %v", err)
	}

	good := encode(t, Version, Header{}, sample())
	broken := map[string][]byte{
		"empty":         nil,
		"truncated":     good[:len(good)/2],
		"not zstd":      []byte("KILNSNAP"),
		"trailing data": append(bytes.Clone(good), 0),
	}
	for name, raw := range broken {
		if _, _, err := readAll(raw); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

// FuzzRead: whatever the bytes, Read returns (an error or the entries)
// without panicking, and what it accepts passes the checks again when
// written anew.
func FuzzRead(f *testing.F) {
	f.Add(encode(f, Version, Header{Space: "s"}, sample()))
	f.Add(encode(f, 1, Header{}, sample()))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, _, err := readAll(raw)
		if err != nil {
			return
		}
		if _, _, err := readAll(encode(t, Version, Header{}, got)); err != nil {
			t.Fatalf("accepted entries refused when written again: %v", err)
		}
	})
}
