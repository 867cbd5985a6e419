package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// hostileCase is one attack of testdata/hostile.json.
type hostileCase struct {
	Name        string          `json:"name"`
	Method      string          `json:"method"`
	Path        string          `json:"path"` // below /servers/{id}/files/
	Body        json.RawMessage `json:"body"`
	ContentType string          `json:"content_type"`
	Status      int             `json:"status"`
	Code        string          `json:"code"`
	Advisory    string          `json:"advisory"`
}

// treeHash describes a tree without following links: every path with its
// type, mode, size, content hash or link target.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v %d", rel, fi.Mode(), fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			line += " -> " + tgt
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		case fi.IsDir():
			line = fmt.Sprintf("%s %v", rel, fi.Mode())
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return strings.Join(lines, "\n")
}

// TestHostileCorpus replays testdata/hostile.json against a server whose
// root is planted with escapes: symlinks to a fake /etc, to the real /etc
// (read-only cases only), to another server's root (absolute and
// relative), to the roots' parent, out of a subdirectory, a loop, a FIFO
// and a hard link to a file outside. Every case gets a freshly planted
// root. It checks the exact status and code; that a refused request left
// the root unchanged; and that the other server's root, the fake /etc and
// the outside directory are byte-for-byte unchanged after every case.
func TestHostileCorpus(t *testing.T) {
	data, err := os.ReadFile("testdata/hostile.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []hostileCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 50 {
		t.Fatalf("the corpus has %d cases; the issue asks for at least 50", len(cases))
	}
	h := newHarness(t, sqliteDB(t))
	id, root := h.fileServer(1024)
	otherID, otherRoot := h.fileServer(1024)
	serversDir := filepath.Dir(root)
	outside := filepath.Join(serversDir, "outside")
	fakeEtc := filepath.Join(h.dataDir, "fake-etc")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct{ path, content string }{
		{filepath.Join(outside, "secret.txt"), "outside secret"},
		{filepath.Join(outside, "hl-target.txt"), "hard-linked outside file"},
		{filepath.Join(fakeEtc, "passwd"), "root:x:0:0"},
		{filepath.Join(fakeEtc, "cron.d", "keep"), "cron"},
		{filepath.Join(otherRoot, "secret.txt"), "the other server's secret"},
	} {
		must(os.MkdirAll(filepath.Dir(f.path), 0o755))
		must(os.WriteFile(f.path, []byte(f.content), 0o644))
	}
	plant := func() {
		t.Helper()
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			must(os.RemoveAll(filepath.Join(root, e.Name())))
		}
		must(os.WriteFile(filepath.Join(root, "server.properties"), []byte("motd=victim\n"), 0o644))
		must(os.MkdirAll(filepath.Join(root, "plugins"), 0o755))
		must(os.Symlink(fakeEtc, filepath.Join(root, "etc")))
		must(os.Symlink("/etc", filepath.Join(root, "realetc")))
		must(os.Symlink(otherRoot, filepath.Join(root, "other")))
		must(os.Symlink("../"+otherID, filepath.Join(root, "relother")))
		must(os.Symlink("..", filepath.Join(root, "up")))
		must(os.Symlink("../../outside/secret.txt", filepath.Join(root, "plugins", "escape")))
		must(os.Symlink("loop", filepath.Join(root, "loop")))
		must(syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644))
		must(os.Link(filepath.Join(outside, "hl-target.txt"), filepath.Join(root, "hardlink")))
	}
	guarded := map[string]string{}
	for _, d := range []string{outside, fakeEtc, otherRoot} {
		guarded[d] = treeHash(t, d)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			plant()
			before := treeHash(t, root)
			var body *bytes.Reader
			hdr := []string{}
			switch {
			case len(tc.Body) == 0:
				body = bytes.NewReader(nil)
			case tc.ContentType == "application/json":
				body = bytes.NewReader(tc.Body)
			default:
				var s string
				must(json.Unmarshal(tc.Body, &s))
				body = bytes.NewReader([]byte(s))
			}
			if tc.ContentType != "" {
				hdr = append(hdr, "Content-Type", tc.ContentType)
			}
			st, _, out := h.do(tc.Method, Prefix+"/servers/"+id+"/files/"+tc.Path, h.token, body, hdr...)
			if st != tc.Status {
				t.Fatalf("%s %s: status %d, want %d (%s); body %s", tc.Method, tc.Path, st, tc.Status, tc.Advisory, out)
			}
			if tc.Code != "" {
				if got := mustJSON(out)["code"]; got != tc.Code {
					t.Errorf("code = %v, want %s; body %s", got, tc.Code, out)
				}
			}
			if st >= 400 && treeHash(t, root) != before {
				t.Errorf("a refused request changed the server's root")
			}
			if st == 200 && strings.HasPrefix(tc.Path, "search") {
				for _, leak := range []string{"outside secret", "secret.txt", "passwd"} {
					if bytes.Contains(out, []byte(leak)) {
						t.Errorf("search answered something from outside the root (%q): %s", leak, out)
					}
				}
			}
			for d, want := range guarded {
				if got := treeHash(t, d); got != want {
					t.Fatalf("%s changed outside the server's root (%s):\nbefore:\n%s\nafter:\n%s", tc.Name, d, want, got)
				}
			}
		})
	}
	// The advisories the corpus replays, so a reader can find them.
	var advisories []string
	for _, tc := range cases {
		if strings.Contains(tc.Advisory, "CVE-") || strings.Contains(tc.Advisory, "GHSA-") {
			advisories = append(advisories, strings.Fields(tc.Advisory)[0])
		}
	}
	slices.Sort(advisories)
	for _, want := range []string{"CVE-2023-25152", "CVE-2023-25168", "CVE-2024-27102", "GHSA-rhq6-9rgh-v45c"} {
		if !slices.Contains(advisories, want) {
			t.Errorf("the corpus replays no case of %s", want)
		}
	}
}
