package ignore

import (
	"strings"
	"testing"
)

// BenchmarkMatch measures Match on a typical ignore text and on hostile
// ones, as large as Parse accepts, against paths as long as Linux allows.
func BenchmarkMatch(b *testing.B) {
	deep := strings.TrimSuffix(strings.Repeat("a/", 2000), "/")
	benchmarks := []struct {
		name, text, path string
	}{
		{"typical", "*.log\n/logs/\n!keep.log\ncache/\n**/tmp\nworld/*.lock\n", "world/region/r.0.0.mca"},
		{"starstar chains", strings.Repeat(strings.Repeat("a/**/", 800)+"b\n", 16), deep},
		{"star chains", strings.Repeat(strings.Repeat("*a", 2000)+"*b\n", 16), strings.Repeat("a", 4000)},
		{"many short patterns", strings.Repeat("a/**/?b\n", 8000), deep},
		{"starstar star mix", strings.Repeat(strings.Repeat("a/**/*a*", 250)+"b\n", 32), strings.TrimSuffix(strings.Repeat("a/aa/", 800), "/")},
	}
	for _, bm := range benchmarks {
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
