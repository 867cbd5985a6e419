package catalog

import (
	"strconv"
	"strings"
)

// Java rule sources.
const (
	JavaMinecraft = "minecraft" // from the game version (network.md §6 table)
	JavaFixed     = "fixed"     // always JavaRule.Major (proxies)
	JavaNone      = "none"      // no Java (the kiln test server)
)

// newestJava is the Java of the newest game versions, used for versions
// the table does not know (future ones, "latest", unparsable names).
const newestJava = 25

// JavaRule says how a profile's Java major version is chosen.
type JavaRule struct {
	Source string `json:"source" yaml:"source"`
	Major  int    `json:"major,omitempty" yaml:"major"`
}

// JavaFor returns the Java major version to run gameVersion with. For
// Minecraft-versioned profiles it follows network.md §6: ≤1.16.5 → 8,
// 1.17 → 16, 1.18–1.20.4 → 17, 1.20.5–1.21.x → 21, year-based 26.x → 25;
// snapshots (24w14a) by their date; old alpha/beta versions → 8; anything
// unknown → 25. The installer's Result.JavaMajor, taken from Mojang's
// javaVersion.majorVersion when it knows it, wins over this table.
func (p Profile) JavaFor(gameVersion string) int {
	switch p.Java.Source {
	case JavaFixed:
		return p.Java.Major
	case JavaNone:
		return 0
	}
	return minecraftJava(gameVersion)
}

func minecraftJava(v string) int {
	v = strings.ToLower(strings.TrimSpace(v))
	if year, week, ok := snapshot(v); ok {
		switch {
		case year < 21 || year == 21 && week < 19:
			return 8
		case year == 21 && week < 37:
			return 16
		case year < 24 || year == 24 && week < 14:
			return 17
		case year < 26:
			return 21
		default:
			return newestJava
		}
	}
	for _, old := range []string{"rd-", "inf-", "c0.", "a1.", "b1."} {
		if strings.HasPrefix(v, old) {
			return 8
		}
	}
	n := numericPrefix(v)
	if len(n) < 2 {
		return newestJava
	}
	if n[0] != 1 { // year-based (26.1, …) and anything newer than the table
		return newestJava
	}
	minor, patch := n[1], 0
	if len(n) > 2 {
		patch = n[2]
	}
	switch {
	case minor <= 16:
		return 8
	case minor == 17:
		return 16
	case minor < 20 || minor == 20 && patch <= 4:
		return 17
	default:
		return 21
	}
}

// snapshot parses a weekly snapshot name such as "24w14a".
func snapshot(v string) (year, week int, ok bool) {
	if len(v) != 6 || v[2] != 'w' || v[5] < 'a' || v[5] > 'z' {
		return 0, 0, false
	}
	y, err1 := strconv.Atoi(v[:2])
	w, err2 := strconv.Atoi(v[3:5])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return y, w, true
}

// numericPrefix returns the dotted numbers v starts with: "1.20.5-rc1" →
// [1 20 5], "26.1-snapshot-1" → [26 1], "x" → nil.
func numericPrefix(v string) []int {
	var out []int
	for part := range strings.SplitSeq(v, ".") {
		end := 0
		for end < len(part) && part[end] >= '0' && part[end] <= '9' {
			end++
		}
		if end == 0 || end > 9 {
			break
		}
		n, _ := strconv.Atoi(part[:end])
		out = append(out, n)
		if end < len(part) {
			break
		}
	}
	return out
}
