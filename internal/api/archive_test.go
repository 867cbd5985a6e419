package api

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestArchives(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	for rel, content := range map[string]string{"world/level.dat": "level", "world/region/r.0.0.mca": strings.Repeat("r", 5000), "plugins/a.yml": "a: 1"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, format := range []string{"", "zip", "tar.zst"} {
		t.Run("format "+format, func(t *testing.T) {
			st, body := h.files("POST", id, "compress", map[string]any{"root": "/", "files": []string{"world", "plugins/a.yml"}, "format": format})
			if st != 200 {
				t.Fatalf("compress: %d %s", st, body)
			}
			a := mustJSON(body)["archive"].(map[string]any)
			name := a["name"].(string)
			ext := format
			if ext == "" {
				ext = "tar.gz"
			}
			if !strings.HasPrefix(name, "archive-") || !strings.HasSuffix(name, "."+ext) || a["is_file"] != true || a["size"].(float64) <= 0 {
				t.Fatalf("archive = %v", a)
			}
			dest := "/restore-" + strings.ReplaceAll(ext, ".", "")
			if st, body = h.files("POST", id, "create-directory", map[string]string{"root": "/", "name": dest}); st != 200 {
				t.Fatalf("mkdir: %d %s", st, body)
			}
			if err := os.Rename(filepath.Join(root, name), filepath.Join(root, dest, name)); err != nil {
				t.Fatal(err)
			}
			if st, body = h.files("POST", id, "decompress", map[string]string{"root": dest, "file": name}); st != 200 {
				t.Fatalf("decompress: %d %s", st, body)
			}
			b, err := os.ReadFile(filepath.Join(root, dest, "world/region/r.0.0.mca"))
			if err != nil || len(b) != 5000 {
				t.Errorf("extracted region: %d bytes, %v", len(b), err)
			}
		})
	}

	// A zip-slip archive is refused whole, naming the entry; nothing lands.
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	w, _ := zw.Create("ok.txt")
	w.Write([]byte("fine"))
	w, _ = zw.Create("../../outside.txt")
	w.Write([]byte("evil"))
	zw.Close()
	if err := os.WriteFile(filepath.Join(root, "slip.zip"), zb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	st, body := h.files("POST", id, "decompress", map[string]string{"root": "/", "file": "slip.zip"})
	wantError(t, st, body, 422, "UNSUPPORTED_ARCHIVE", `"../../outside.txt"`)
	if _, err := os.Stat(filepath.Join(root, "ok.txt")); !os.IsNotExist(err) {
		t.Errorf("ok.txt extracted from a refused archive: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(root)), "outside.txt")); !os.IsNotExist(err) {
		t.Errorf("the zip-slip entry landed outside: %v", err)
	}

	// A small archive that expands past the disk limit stops there.
	var bomb bytes.Buffer
	zw = zip.NewWriter(&bomb)
	w, _ = zw.Create("zeros.bin")
	chunk := make([]byte, 1<<20)
	for range 1100 {
		w.Write(chunk)
	}
	zw.Close()
	if err := os.WriteFile(filepath.Join(root, "bomb.zip"), bomb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	st, body = h.files("POST", id, "decompress", map[string]string{"root": "/", "file": "bomb.zip"})
	wantError(t, st, body, 507, "QUOTA_EXCEEDED", "disk limit")
	if _, err := os.Stat(filepath.Join(root, "zeros.bin")); !os.IsNotExist(err) {
		t.Errorf("zeros.bin left after the quota refusal: %v", err)
	}

	st, body = h.files("POST", id, "decompress", map[string]string{"root": "/", "file": "plugins/a.yml"})
	wantError(t, st, body, 422, "UNSUPPORTED_ARCHIVE", "supported format")
	st, body = h.files("POST", id, "compress", map[string]any{"root": "/", "files": []string{"world"}, "format": "rar"})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "format")
	st, body = h.files("POST", id, "compress", map[string]any{"root": "/", "files": []string{"../x"}})
	wantError(t, st, body, 400, "VALIDATION_ERROR", "..")
}
