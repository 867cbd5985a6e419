package spec

import (
	"errors"
	"testing"

	"github.com/kilnhq/kiln/internal/validate"
)

// FuzzParse: Parse never panics, and answers either a spec whose hash it
// can compute or a *validate.Error (seed corpus in testdata/fuzz).
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("version: 1\nservers:\n  a: &x {software: paper, memory: 1G}\n  b: *x\n"))
	f.Add([]byte("version: 1\nservers: {a: {software: paper, memory: 1G, files: [{path: a/../b, content: ~}]}}\n"))
	f.Add([]byte("{version: 1, proxies: {p: {software: velocity, memory: 1G, servers: [p], try: []}}}"))
	f.Add([]byte("version: 1\ndbservices: {d: {engine: mariadb, max_connections: 0x14}}\n"))
	f.Add([]byte(wired))
	f.Add([]byte("version: 1\nservers: {a: {software: paper, memory: 1G, files: [{path: x, content: \"${servers.a.address\\n$${servers.\"}]}}}\n"))
	cat := testCatalog(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, cat)
		if err != nil {
			var ve *validate.Error
			if !errors.As(err, &ve) || len(ve.Issues) == 0 {
				t.Fatalf("Parse = %T %v, want a *validate.Error with issues", err, err)
			}
			return
		}
		if _, err := s.Hash(); err != nil {
			t.Fatalf("Hash of an accepted spec: %v", err)
		}
	})
}
