package archive

import (
	"fmt"
	"strconv"
	"strings"
)

// What a compressed stream or a zip directory may make a decoder
// allocate. Each is checked on what the archive declares, before the
// allocation: see doc.go for the figures.
const (
	// xzMaxDict is the largest xz (LZMA2) dictionary accepted: 64 MiB,
	// what xz -9 (and -9e) use. LZMA2 can declare up to 4 GiB.
	xzMaxDict = 64 << 20
	// xzDictSlack: the dictionaries of all of an .xz file's blocks may
	// add up to this plus twice the bytes decoded, no more (each block
	// allocates its own: many tiny blocks declaring 64 MiB each would
	// make zeroing memory the work of the request).
	xzDictSlack = 512 << 20
	// zstdMaxWindow is the largest zstd window accepted: 128 MiB, the
	// window of `zstd --long` (window log 27) and of levels 20-22, and
	// what the zstd tool itself decodes without --memory.
	zstdMaxWindow = 128 << 20
	// zipMaxDirectory is the largest zip central directory accepted: the
	// names the extractor accepts in all (maxNameTotal, 64 MiB) plus 128
	// bytes of record and extra fields for each of MaxEntries entries (a
	// record is 46 bytes; Info-ZIP's extra fields add ~24), 186 MiB,
	// rounded up.
	zipMaxDirectory = 192 << 20
)

// limitError refuses a whole archive for what it declares (a dictionary,
// a window, a directory), before anything is allocated or extracted: an
// *EntryError without a name, whose message names the limit.
func limitError(format string, args ...any) *EntryError {
	return &EntryError{Reason: fmt.Sprintf(format, args...), limit: true}
}

// sizeString writes n bytes for a person: "1.5 GiB", "64 MiB", "512 bytes".
func sizeString(n uint64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1<<10 {
		return strconv.FormatUint(n, 10) + " bytes"
	}
	v, unit := float64(n)/(1<<10), units[0]
	for _, u := range units[1:] {
		if v < 1<<10 {
			break
		}
		v, unit = v/(1<<10), u
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + unit
}
