package docker

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLine)
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string
	}{
		{"one line", []string{"hello\n"}, []string{"hello"}},
		{"crlf", []string{"hello\r\n"}, []string{"hello"}},
		{"split across writes", []string{"hel", "lo\nwor", "ld\n"}, []string{"hello", "world"}},
		{"several in one write", []string{"a\nb\n\nc\n"}, []string{"a", "b", "", "c"}},
		{"no final newline", []string{"tail"}, []string{"tail"}},
		{"exactly the cap", []string{long + "\n"}, []string{long}},
		{"over the cap", []string{long + "yz\n"}, []string{long, "yz"}},
		{"over the cap without newline", []string{long, "yz"}, []string{long, "yz"}},
		{"over the cap across writes", []string{long[:100], long[100:] + "z\n"}, []string{long, "z"}},
		{"twice the cap", []string{long + long + "\n"}, []string{long, long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			w := newLineWriter(func(l string) { got = append(got, l) })
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(s), n, err)
				}
			}
			w.Flush()
			if !slices.Equal(got, tc.want) {
				t.Errorf("lines = %s, want %s", abbrev(got), abbrev(tc.want))
			}
		})
	}
}

func abbrev(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if len(l) > 20 {
			b.WriteString("[" + l[:10] + "…(" + strconv.Itoa(len(l)) + ")]")
		} else {
			b.WriteString("[" + l + "]")
		}
	}
	return b.String()
}
