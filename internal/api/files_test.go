package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/auth"
)

// fileServer creates an installed kiln-test server and returns its id and
// root directory.
func (h *harness) fileServer(diskMB int) (string, string) {
	h.t.Helper()
	st, body := h.postJSON("/servers", map[string]any{"name": "files", "software": "kiln-test", "memory_mb": 512, "disk_mb": diskMB})
	if st != 202 {
		h.t.Fatalf("create: %d %s", st, body)
	}
	id := mustJSON(body)["server"].(map[string]any)["id"].(string)
	h.waitStatus(id, "offline")
	return id, filepath.Join(h.dataDir, "servers", id)
}

func (h *harness) files(method, id, suffix string, body any, hdr ...string) (int, []byte) {
	h.t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
		hdr = append(hdr, "Content-Type", "application/json")
	}
	st, _, out := h.do(method, Prefix+"/servers/"+id+"/files/"+suffix, h.token, rd, hdr...)
	return st, out
}

func TestFilesEndToEnd(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)

	// write (text/plain), contents round trip, parents created
	st, body := h.files("POST", id, "write?file="+url.QueryEscape("/plugins/Essentials/config.yml"), "motd: hi\n", "Content-Type", "text/plain; charset=utf-8")
	if st != 200 || string(body) != "{\"ok\":true}\n" {
		t.Fatalf("write: %d %s", st, body)
	}
	st, body = h.files("GET", id, "contents?file=/plugins/Essentials/config.yml", nil)
	if st != 200 || string(body) != "\"motd: hi\\n\"\n" {
		t.Fatalf("contents: %d %s", st, body)
	}
	// octet-stream write, download streams the bytes back
	bin := []byte{0, 1, 2, 255, 254}
	st, _ = h.files("POST", id, "write?file=/world/level.dat", string(bin), "Content-Type", "application/octet-stream")
	if st != 200 {
		t.Fatalf("binary write: %d", st)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+Prefix+"/servers/"+id+"/files/download?file=/world/level.dat", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	got.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got.Bytes(), bin) ||
		resp.Header.Get("Content-Disposition") != "attachment; filename=level.dat" || resp.Header.Get("Content-Length") != "5" {
		t.Errorf("download: %d %q %v", resp.StatusCode, got.Bytes(), resp.Header)
	}

	// create-directory, list (directories first), exact FileEntry shape
	if st, body = h.files("POST", id, "create-directory", map[string]string{"root": "/plugins", "name": "LuckPerms/data"}); st != 200 {
		t.Fatalf("create-directory: %d %s", st, body)
	}
	st, body = h.files("GET", id, "list?directory=/plugins", nil)
	if st != 200 {
		t.Fatalf("list: %d %s", st, body)
	}
	var list struct {
		Files []map[string]any `json:"files"`
		Count int              `json:"count"`
	}
	json.Unmarshal(body, &list)
	if list.Count != 2 || list.Files[0]["name"] != "Essentials" || list.Files[1]["name"] != "LuckPerms" {
		t.Fatalf("list = %s", body)
	}
	e := list.Files[0]
	if e["is_directory"] != true || e["is_file"] != false || e["mime"] != "inode/directory" || e["mode"] != "drwxr-xr-x" || e["mode_bits"] != "755" || e["size"] != 0.0 {
		t.Errorf("directory entry = %v", e)
	}
	st, body = h.files("GET", id, "list", nil)
	var top struct{ Files []map[string]any }
	if err := json.Unmarshal(body, &top); st != 200 || err != nil {
		t.Fatalf("list /: %d %s", st, body)
	}
	var names []string
	for _, f := range top.Files {
		names = append(names, f["name"].(string))
	}
	for _, want := range []string{"plugins", "world", "server.properties"} {
		if !slices.Contains(names, want) {
			t.Errorf("root list %v lacks %s", names, want)
		}
	}

	// rename (move across directories), copy, chmod, search, delete
	st, body = h.files("POST", id, "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "plugins/Essentials/config.yml", "to": "backup/config.yml"}}})
	if st != 200 {
		t.Fatalf("rename: %d %s", st, body)
	}
	st, body = h.files("POST", id, "copy", map[string]string{"location": "/backup/config.yml"})
	if st != 200 || mustJSON(body)["file"].(map[string]any)["name"] != "config copy.yml" {
		t.Fatalf("copy: %d %s", st, body)
	}
	st, body = h.files("POST", id, "chmod", map[string]any{"root": "/backup", "files": []map[string]string{{"file": "config.yml", "mode": "600"}}})
	if fi, _ := os.Stat(filepath.Join(root, "backup/config.yml")); st != 200 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("chmod: %d %s", st, body)
	}
	st, body = h.files("GET", id, "search?pattern=*.YML&directory=/", nil)
	var sr struct {
		Results []map[string]any `json:"results"`
		Count   int              `json:"count"`
	}
	json.Unmarshal(body, &sr)
	if st != 200 || sr.Count != 2 || sr.Results[0]["directory"] != "/backup" {
		t.Fatalf("search: %d %s", st, body)
	}
	st, body = h.files("POST", id, "delete", map[string]any{"root": "/", "files": []string{"backup", "plugins"}})
	if st != 200 {
		t.Fatalf("delete: %d %s", st, body)
	}
	if _, err := os.Stat(filepath.Join(root, "backup")); !os.IsNotExist(err) {
		t.Errorf("backup after delete: %v", err)
	}
}

func TestFilesErrors(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	if err := os.WriteFile(filepath.Join(root, "big.log"), make([]byte, 10<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "world"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, suffix string
		body                 any
		hdr                  []string
		status               int
		code, msg            string
	}{
		{"contents of a dir", "GET", "contents?file=/world", nil, nil, 422, "NOT_A_FILE", "not a regular file"},
		{"contents too big", "GET", "contents?file=/big.log", nil, nil, 413, "FILE_TOO_LARGE", "download it"},
		{"contents missing", "GET", "contents?file=/nope", nil, nil, 404, "FILE_NOT_FOUND", "file not found"},
		{"contents needs file", "GET", "contents", nil, nil, 400, "VALIDATION_ERROR", "file"},
		{"contents file twice", "GET", "contents?file=a&file=b", nil, nil, 400, "VALIDATION_ERROR", "more than once"},
		{"list a file", "GET", "list?directory=/big.log", nil, nil, 422, "NOT_A_DIRECTORY", "not a directory"},
		{"list dotdot", "GET", "list?directory=/../", nil, nil, 400, "VALIDATION_ERROR", ".."},
		{"list through /etc link", "GET", "list?directory=/etc", nil, nil, 404, "FILE_NOT_FOUND", "not found"},
		{"read through /etc link", "GET", "contents?file=/etc/passwd", nil, nil, 404, "FILE_NOT_FOUND", "not found"},
		{"write json type", "POST", "write?file=/a", "x", []string{"Content-Type", "application/json"}, 415, "UNSUPPORTED_MEDIA_TYPE", "text/plain"},
		{"write the root", "POST", "write?file=/", "x", []string{"Content-Type", "text/plain"}, 422, "NOT_A_FILE", "regular file"},
		{"write over dir", "POST", "write?file=/world", "x", []string{"Content-Type", "text/plain"}, 422, "NOT_A_FILE", "regular file"},
		{"rename onto existing", "POST", "rename", map[string]any{"files": []map[string]string{{"from": "big.log", "to": "server.properties"}}}, nil, 409, "CONFLICT", "already exists"},
		{"rename none", "POST", "rename", map[string]any{"files": []map[string]string{}}, nil, 400, "VALIDATION_ERROR", "at least one"},
		{"delete the root", "POST", "delete", map[string]any{"root": "/", "files": []string{"/"}}, nil, 400, "VALIDATION_ERROR", "root"},
		{"chmod setuid", "POST", "chmod", map[string]any{"files": []map[string]string{{"file": "big.log", "mode": "4755"}}}, nil, 400, "VALIDATION_ERROR", "setuid"},
		{"chmod a link", "POST", "chmod", map[string]any{"files": []map[string]string{{"file": "etc", "mode": "777"}}}, nil, 422, "NOT_A_FILE", "symbolic link"},
		{"copy a dir", "POST", "copy", map[string]string{"location": "/world"}, nil, 422, "NOT_A_FILE", "regular file"},
		{"search bad glob", "GET", "search?pattern=[a", nil, nil, 400, "VALIDATION_ERROR", "glob"},
		{"search no pattern", "GET", "search", nil, nil, 400, "VALIDATION_ERROR", "pattern"},
		{"create-dir no name", "POST", "create-directory", map[string]string{"root": "/"}, nil, 400, "VALIDATION_ERROR", "name"},
		{"create-dir unknown field", "POST", "create-directory", map[string]string{"name": "x", "path": "y"}, nil, 400, "VALIDATION_ERROR", "path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := h.files(tc.method, id, tc.suffix, tc.body, tc.hdr...)
			wantError(t, st, body, tc.status, tc.code, tc.msg)
		})
	}
	// Another team's server is not found, on a file route too.
	other, _ := h.auth.CreateTeam(t.Context(), "other")
	tok, _, err := h.auth.CreateToken(t.Context(), other.Name, auth.KindUser, "bob")
	if err != nil {
		t.Fatal(err)
	}
	st, _, body := h.do("GET", Prefix+"/servers/"+id+"/files/list", string(tok), nil)
	wantError(t, st, body, 404, "SERVER_NOT_FOUND", "not found")
	st, _, body = h.do("GET", Prefix+"/servers/nope/files/list", h.token, nil)
	wantError(t, st, body, 400, "INVALID_SERVER_ID", "nope")
}

// TestFilesQuota: the disk limit (1 GiB) is enforced on the bytes written;
// a refused write leaves nothing behind.
func TestFilesQuota(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	// Fill the root to 8 MiB under the limit.
	fill := filepath.Join(root, "fill.bin")
	f, _ := os.Create(fill)
	f.Truncate(1024<<20 - 8<<20) // sparse, but its size counts
	f.Close()
	big := strings.Repeat("x", 9<<20)
	st, body := h.files("POST", id, "write?file=/too-big.txt", big, "Content-Type", "text/plain")
	wantError(t, st, body, 507, "QUOTA_EXCEEDED", "disk limit")
	if _, err := os.Stat(filepath.Join(root, "too-big.txt")); !os.IsNotExist(err) {
		t.Errorf("too-big.txt exists after a refused write: %v", err)
	}
	st, body = h.files("POST", id, "write?file=/fits.txt", big[:7<<20], "Content-Type", "text/plain")
	if st != 200 {
		t.Fatalf("a write that fits: %d %s", st, body)
	}
	st, body = h.files("POST", id, "copy", map[string]string{"location": "/fits.txt"})
	wantError(t, st, body, 507, "QUOTA_EXCEEDED", "disk limit")
}
