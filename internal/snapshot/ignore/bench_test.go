package ignore

import (
	"strings"
	"testing"
)

// hostile are the texts of BenchmarkMatch, as large as Parse accepts,
// with paths as long as Linux allows.
func hostile() []struct{ name, text, path string } {
	deep := strings.TrimSuffix(strings.Repeat("a/", 2000), "/")
	return []struct{ name, text, path string }{
		{"typical", "*.log\n/logs/\n!keep.log\ncache/\n**/tmp\nworld/*.lock\n", "world/region/r.0.0.mca"},
		{"starstar chains", strings.Repeat(strings.Repeat("a/**/", 800)+"b\n", 16), deep},
		{"star chains", strings.Repeat(strings.Repeat("*a", 2000)+"*b\n", 16), strings.Repeat("a", 4000)},
		{"many short patterns", strings.Repeat("a/**/?b\n", 8000), deep},
		{"starstar star mix", strings.Repeat(strings.Repeat("a/**/*a*", 250)+"b\n", 32), strings.TrimSuffix(strings.Repeat("a/aa/", 800), "/")},
	}
}

// BenchmarkMatch measures Match on a typical ignore text and on hostile
// ones, one path asked about again and again (the cache warm).
func BenchmarkMatch(b *testing.B) {
	for _, bm := range hostile() {
		m, err := Parse(bm.text)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				m.Match(bm.path, false)
			}
		})
	}
}

// BenchmarkMatchCold is BenchmarkMatch with the cache emptied before
// each Match: the first path a Matcher is asked about.
func BenchmarkMatchCold(b *testing.B) {
	for _, bm := range hostile() {
		m, err := Parse(bm.text)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				m.dropCache()
				m.Match(bm.path, false)
			}
		})
	}
}

// BenchmarkWalk asks about every entry of a tree 500 directories deep
// (a directory and a file at each level: 1,000 paths, 503,000 bytes of
// paths) as a snapshot's walk does, from an empty cache; ns/byte is per
// byte of path asked about.
func BenchmarkWalk(b *testing.B) {
	var paths []string
	var dirs []bool
	dir := ""
	for range 500 {
		dir += "a"
		paths, dirs = append(paths, dir, dir+"/x.log"), append(dirs, true, false)
		dir += "/"
	}
	total := 0
	for _, p := range paths {
		total += len(p)
	}
	for _, bm := range hostile() {
		m, err := Parse(bm.text)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				m.dropCache()
				for i, p := range paths {
					m.Match(p, dirs[i])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(total), "ns/byte")
		})
	}
}

// BenchmarkParse measures Parse on a typical text and on the largest
// ones it accepts.
func BenchmarkParse(b *testing.B) {
	for _, bm := range []struct{ name, text string }{
		{"typical", "*.log\n/logs/\n!keep.log\ncache/\n**/tmp\nworld/*.lock\n[Bb]ackup*/\n"},
		{"largest glob", strings.Repeat("?", MaxSize)},
		{"most patterns", strings.Repeat("a/*\n", MaxPatterns)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Parse(bm.text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
