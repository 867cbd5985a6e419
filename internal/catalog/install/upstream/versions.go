package upstream

import (
	"strconv"
	"strings"
)

// compareVersions orders version names such as "1.20.1", "1.21", "21.1.77",
// "20.2.3-beta": dotted numbers compare numerically, a missing number
// counts as 0, and at equal numbers a version without suffix is newer than
// one with a suffix (a pre-release).
func compareVersions(a, b string) int {
	an, as := splitVersion(a)
	bn, bs := splitVersion(b)
	for k := 0; k < max(len(an), len(bn)); k++ {
		var x, y int
		if k < len(an) {
			x = an[k]
		}
		if k < len(bn) {
			y = bn[k]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case as == bs:
		return 0
	case as == "":
		return 1
	case bs == "":
		return -1
	}
	return strings.Compare(as, bs)
}

// splitVersion splits "1.20.5-rc1" into [1 20 5] and "-rc1".
func splitVersion(v string) ([]int, string) {
	var nums []int
	rest := v
	for {
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if end == 0 || end > 9 {
			return nums, rest
		}
		n, _ := strconv.Atoi(rest[:end])
		nums = append(nums, n)
		rest = rest[end:]
		if !strings.HasPrefix(rest, ".") || len(rest) < 2 || rest[1] < '0' || rest[1] > '9' {
			return nums, rest
		}
		rest = rest[1:]
	}
}
