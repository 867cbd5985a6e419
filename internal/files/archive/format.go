package archive

import (
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// Format is an archive format Compress writes.
type Format string

// Formats Compress writes; the value is also the file name's extension.
const (
	TarGz  Format = "tar.gz" // the default: parallel gzip (pgzip)
	Zip    Format = "zip"    // deflate
	TarZst Format = "tar.zst"
)

// ParseFormat reads the API's format field: "" is TarGz. Anything else
// than the three formats is a *validate.Error at field.
func ParseFormat(field, s string) (Format, error) {
	switch Format(s) {
	case "":
		return TarGz, nil
	case TarGz, Zip, TarZst:
		return Format(s), nil
	}
	return "", validate.Errorf(field, "must be one of tar.gz, zip, tar.zst")
}

// kind is how Decompress reads a file, chosen by its extension.
type kind int

const (
	kindNone kind = iota
	kindZip
	kindTar
	kindTarGz
	kindTarZst
	kindTarXz
	kindGz // one gzip-compressed file
)

// suffixes in the order they are tried: longer ones first (".tar.gz"
// before ".gz").
var suffixes = []struct {
	ext  string
	kind kind
}{
	{".tar.gz", kindTarGz}, {".tgz", kindTarGz},
	{".tar.zst", kindTarZst}, {".tzst", kindTarZst},
	{".tar.xz", kindTarXz}, {".txz", kindTarXz},
	{".tar", kindTar},
	{".zip", kindZip}, {".jar", kindZip},
	{".gz", kindGz},
}

// kindOf picks the reader for a file name (case-insensitive) and, for a
// single .gz file, the name it extracts to. A name that is only the
// extension (".gz") has no stem and is not an archive.
func kindOf(name string) (kind, string) {
	lower := strings.ToLower(name)
	for _, s := range suffixes {
		if strings.HasSuffix(lower, s.ext) && len(name) > len(s.ext) {
			return s.kind, name[:len(name)-len(s.ext)]
		}
	}
	return kindNone, ""
}
