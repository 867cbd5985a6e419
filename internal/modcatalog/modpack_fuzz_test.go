package modcatalog

import (
	"archive/zip"
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
)

// FuzzPackPath: a path packPath accepts is clean, relative, inside the
// root, and not a Kiln temporary name.
func FuzzPackPath(f *testing.F) {
	for _, s := range []string{"mods/a.jar", "a/../../etc", "/etc/passwd", "..", "./x", "a//b", `mods\..\x`, "C:/x",
		".kiln-tmp-x/y", "a/./b/", "", "x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		name, err := packPath(raw)
		if err != nil {
			return
		}
		if c, err := files.Clean("path", name); err != nil || c != name {
			t.Fatalf("packPath(%q) = %q, which Clean changes to %q (%v)", raw, name, c, err)
		}
		if name == "." || strings.HasPrefix(name, "/") || strings.Contains(name, `\`) {
			t.Fatalf("packPath(%q) = %q", raw, name)
		}
		for seg := range strings.SplitSeq(name, "/") {
			if seg == ".." || quota.Reserved(seg) {
				t.Fatalf("packPath(%q) = %q", raw, name)
			}
		}
	})
}

// FuzzReadPack: whatever the archive, readPack answers without panicking,
// and a pack it accepts has only clean paths and allowed URLs.
func FuzzReadPack(f *testing.F) {
	mk := func(entries ...string) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for i := 0; i+1 < len(entries); i += 2 {
			w, _ := zw.Create(entries[i])
			w.Write([]byte(entries[i+1]))
		}
		zw.Close()
		return buf.Bytes()
	}
	sha := strings.Repeat("ab", 64)
	f.Add(mk("modrinth.index.json", `{"formatVersion":1,"game":"minecraft","dependencies":{"minecraft":"1.21.4"},"files":[]}`))
	f.Add(mk("modrinth.index.json", `{"formatVersion":1,"game":"minecraft","dependencies":{"minecraft":"1.21.4"},"files":[{"path":"mods/a.jar","hashes":{"sha512":"`+sha+`"},"downloads":["https://cdn.modrinth.com/a.jar"]}]}`,
		"overrides/config/a.toml", "x", "server-overrides/config/a.toml", "y", "overrides/../x", "z"))
	f.Add(mk("modrinth.index.json", `{"formatVersion":1,"game":"minecraft","dependencies":{"minecraft":"1.21.4"},"files":[{"path":"../a","hashes":{"sha512":"`+sha+`"},"downloads":["https://evil.test/a"]}]}`))
	f.Add([]byte("not a zip"))
	m, err := NewModpacks(nil, nil, ModpackOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := m.readPack(bytes.NewReader(b), int64(len(b)), "file")
		if err != nil {
			return
		}
		for _, d := range p.downloads {
			if c, err := files.Clean("path", d.path); err != nil || c != d.path || c == "." {
				t.Fatalf("accepted download path %q", d.path)
			}
			for _, u := range d.urls {
				if !m.allowed(u) {
					t.Fatalf("accepted URL %q", u)
				}
			}
		}
		for _, o := range p.overrides {
			if c, err := files.Clean("path", o.path); err != nil || c != o.path || c == "." {
				t.Fatalf("accepted override path %q", o.path)
			}
		}
	})
}
