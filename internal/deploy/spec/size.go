package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// sizeRE is a size as a spec writes it: a whole number and a binary unit.
var sizeRE = regexp.MustCompile(`^([0-9]{1,7})\s*([MGTmgt])(?:i?[Bb]|i)?$`)

// ParseSize reads a size with a binary unit: "512M", "2G", "2GiB", "1T";
// M, G and T are MiB, GiB and TiB whatever the spelling (M, Mi, MB, MiB, in
// either case). A number without a unit is refused: "2048" could mean
// bytes or megabytes, and a spec must not be read two ways.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("must be a whole number with a unit: M, G or T (512M, 2G, 1T), not %q", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64) // at most 7 digits: no overflow
	shift := map[string]uint{"m": 20, "g": 30, "t": 40}[strings.ToLower(m[2])]
	return n << shift, nil
}

// FormatSize writes a size in the largest binary unit that divides it
// exactly: 2G, 512M, 1T.
func FormatSize(b int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return strconv.FormatInt(b>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10) + " bytes"
}
