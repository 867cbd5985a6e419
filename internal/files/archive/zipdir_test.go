package archive

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// zipAsZip64 rewrites the end of zip z (no comment) as zip64 end records
// declaring records entries: the directory stays what it is.
func zipAsZip64(t testing.TB, z []byte, records uint64) []byte {
	t.Helper()
	le := binary.LittleEndian
	end := len(z) - zipDirEndLen
	if le.Uint32(z[end:]) != zipDirEndSig {
		t.Fatal("no end of central directory record at the end")
	}
	size, offset := le.Uint32(z[end+12:]), le.Uint32(z[end+16:])
	out := bytes.Clone(z[:end])
	end64 := uint64(len(out))
	out = le.AppendUint32(out, zipDir64EndSig)
	out = le.AppendUint64(out, zipDir64EndLen-12)
	out = le.AppendUint16(out, 45)
	out = le.AppendUint16(out, 45)
	out = le.AppendUint32(out, 0)
	out = le.AppendUint32(out, 0)
	out = le.AppendUint64(out, records)
	out = le.AppendUint64(out, records)
	out = le.AppendUint64(out, uint64(size))
	out = le.AppendUint64(out, uint64(offset))
	out = le.AppendUint32(out, zipDir64LocSig)
	out = le.AppendUint32(out, 0)
	out = le.AppendUint64(out, end64)
	out = le.AppendUint32(out, 1)
	out = le.AppendUint32(out, zipDirEndSig)
	out = append(out, 0, 0, 0, 0)
	out = le.AppendUint16(out, 0xFFFF)
	out = le.AppendUint16(out, 0xFFFF)
	out = le.AppendUint32(out, 0xFFFFFFFF)
	out = le.AppendUint32(out, 0xFFFFFFFF)
	return le.AppendUint16(out, 0)
}

// zipRecords is a zip of n central directory records (empty names, no
// local headers: archive/zip's NewReader reads only the directory) whose
// end record declares declared entries (16 bits, as writers without zip64
// write them).
func zipRecords(n int, declared uint16) []byte {
	le := binary.LittleEndian
	out := make([]byte, 0, n*zipDirHeaderLen+zipDirEndLen)
	var rec [zipDirHeaderLen]byte
	le.PutUint32(rec[:], zipDirHeaderSig)
	le.PutUint16(rec[4:], 3<<8|20) // made by Unix
	le.PutUint16(rec[6:], 20)
	for range n {
		out = append(out, rec[:]...)
	}
	size := len(out)
	out = le.AppendUint32(out, zipDirEndSig)
	out = append(out, 0, 0, 0, 0)
	out = le.AppendUint16(out, declared)
	out = le.AppendUint16(out, declared)
	out = le.AppendUint32(out, uint32(size))
	out = le.AppendUint32(out, 0)
	return le.AppendUint16(out, 0)
}

func TestCheckZipDirectory(t *testing.T) {
	small := zipOf(t, zipItem{"a.txt", 0o644, "a"}, zipItem{"b/d.txt", 0o644, "d"}, zipItem{"b/c.txt", 0o644, "c"})
	prefixed := append([]byte("#!/bin/sh\nexec unzip \"$0\"\n"), small...) // a self-extracting archive: base offset > 0
	for _, tc := range []struct {
		name       string
		zip        []byte
		maxEntries int
		want       string // "" for accepted
	}{
		{"small", small, 10, ""},
		{"exactly the limit", small, 3, ""},
		{"prefixed", prefixed, 10, ""},
		{"declares one more than the limit", small, 2,
			"the archive's central directory declares 3 entries; at most 2 are allowed"},
		{"zip64 declaring 10 million", zipAsZip64(t, small, 10_000_000), MaxEntries,
			"the archive's central directory declares 10000000 entries; at most 1000000 are allowed"},
		{"zip64 declaring the truth", zipAsZip64(t, small, 3), MaxEntries, ""},
		{"holds more than it declares", zipRecords(65536+5, 5), 10,
			"the archive's central directory holds more than 10 entries; at most 10 are allowed"},
		{"declares a 4 GiB directory", func() []byte {
			z := zipAsZip64(t, small, 3)
			binary.LittleEndian.PutUint64(z[len(z)-zipDirEndLen-zipDir64LocLen-zipDir64EndLen+40:], 4<<30)
			return z
		}(), MaxEntries,
			"the archive's central directory is 4 GiB; at most 192 MiB is allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkZipDirectory(bytes.NewReader(tc.zip), int64(len(tc.zip)), tc.maxEntries)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkZipDirectory = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("checkZipDirectory = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestZipBudget: had the walk and archive/zip ever disagreed, the reader
// stops at the budget rather than reading the directory on.
func TestZipBudget(t *testing.T) {
	z := zipRecords(40000, 40000)
	b := &zipBudget{ra: bytes.NewReader(z), left: 10000*zipDirHeaderLen + zipBudgetSlack}
	_, err := zip.NewReader(b, int64(len(z)))
	if _, ok := errors.AsType[*EntryError](err); !ok {
		t.Fatalf("zip.NewReader over a short budget = %v, want a refusal", err)
	}
	b = &zipBudget{ra: bytes.NewReader(z), left: 40000*zipDirHeaderLen + zipBudgetSlack}
	if zr, err := zip.NewReader(b, int64(len(z))); err != nil || len(zr.File) != 40000 {
		t.Fatalf("zip.NewReader within the budget = %v", err)
	}
}

// FuzzZipDirectory: whenever archive/zip reads more than maxEntries
// entries the check refuses the zip, and whatever the check accepts
// archive/zip reads within the budget the check gave. Seeds: zips of the
// tests above, the 10-million zip64 one among them.
func FuzzZipDirectory(f *testing.F) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"a.txt", "b/", "b/c.txt"} {
		w, _ := zw.Create(name)
		w.Write([]byte(name))
	}
	zw.SetComment("a comment")
	zw.Close()
	f.Add(buf.Bytes())
	small := zipRecords(2, 2)
	f.Add(append([]byte("prefix"), small...))
	f.Add(zipAsZip64(f, small, 10_000_000))
	f.Add(zipAsZip64(f, small, 2))
	f.Add(zipRecords(12, 12))
	f.Add(zipRecords(7, 2))
	const maxEntries = 5
	f.Fuzz(func(t *testing.T, b []byte) {
		size := int64(len(b))
		zr, zerr := zip.NewReader(bytes.NewReader(b), size)
		n, err := checkZipDirectory(bytes.NewReader(b), size, maxEntries)
		if zerr != nil && !errors.Is(zerr, zip.ErrInsecurePath) {
			return
		}
		if len(zr.File) > maxEntries {
			if _, ok := errors.AsType[*EntryError](err); !ok {
				t.Fatalf("archive/zip reads %d entries, check = %d, %v", len(zr.File), n, err)
			}
			return
		}
		if err != nil {
			return // stricter than archive/zip: allowed
		}
		br, err := zip.NewReader(&zipBudget{ra: bytes.NewReader(b), left: n + zipBudgetSlack}, size)
		if err != nil && !errors.Is(err, zip.ErrInsecurePath) || len(br.File) != len(zr.File) {
			t.Fatalf("within the budget (%d): %v, %s", n, err, fmt.Sprint(len(zr.File)))
		}
	})
}
