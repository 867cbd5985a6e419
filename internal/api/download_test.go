package api

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestSnapshotDownload: a ready snapshot downloads in each format as an
// archive that GNU tar extracts into the server's tree (content, modes,
// links, empty directories), named after the snapshot; a bad format, a
// snapshot that is not ready and another team's are refused before any
// byte; a chunk gone after the answer started cuts the transfer off.
func TestSnapshotDownload(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Fatalf("GNU tar is needed to check the download: %v", err)
	}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		id, root := h.fileServer(1024)
		for name, data := range map[string]string{
			"world/region/r.0.0.mca":        strings.Repeat("region bytes ", 200000),
			"server.properties":             "motd=hello\n",
			"plugins/Essentials/config.yml": "a: 1\n",
			"empty.txt":                     "",
		} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(root, "logs"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("plugins/Essentials/config.yml", filepath.Join(root, "config-link")); err != nil {
			t.Fatal(err)
		}
		// The root itself is not in the archive: the tree below it.
		below := func(dir string) string {
			all := treeHash(t, dir)
			return all[strings.Index(all, "\n")+1:]
		}
		want := below(root)
		snapID := h.readySnapshot(id, "before/update")
		me, err := h.auth.TeamByName(t.Context(), "default")
		if err != nil {
			t.Fatal(err)
		}

		for _, c := range []struct{ query, ctype, ext string }{
			{"", "application/gzip", "tar.gz"},
			{"?format=tar.gz", "application/gzip", "tar.gz"},
			{"?format=tar.zst", "application/zstd", "tar.zst"},
			{"?format=tar", "application/x-tar", "tar"},
		} {
			t.Run("format "+c.ext+c.query, func(t *testing.T) {
				st, hdr, body := h.do("GET", Prefix+"/snapshots/"+snapID+"/download"+c.query, h.token, nil)
				if st != 200 {
					t.Fatalf("download: %d %s", st, body)
				}
				wantDisp := `attachment; filename=before_update-` + snapID + "." + c.ext
				if hdr.Get("Content-Type") != c.ctype || hdr.Get("Content-Disposition") != wantDisp ||
					hdr.Get("X-Snapshot-Size-Bytes") != "2600030" {
					t.Errorf("headers: Content-Type %q, Content-Disposition %q (want %q), X-Snapshot-Size-Bytes %q",
						hdr.Get("Content-Type"), hdr.Get("Content-Disposition"), wantDisp, hdr.Get("X-Snapshot-Size-Bytes"))
				}
				plain := body
				switch c.ext {
				case "tar.gz":
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					if plain, err = io.ReadAll(zr); err != nil {
						t.Fatalf("gunzip: %v", err)
					}
				case "tar.zst":
					zr, err := zstd.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					if plain, err = io.ReadAll(zr); err != nil {
						t.Fatalf("unzstd: %v", err)
					}
					zr.Close()
				}
				dir := t.TempDir()
				cmd := exec.Command(tarBin, "-x", "-p", "-C", dir)
				cmd.Stdin = bytes.NewReader(plain)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("tar -x: %v\n%s", err, out)
				}
				if got := below(dir); got != want {
					t.Errorf("extracted tree:\n%s\nwant the server's:\n%s", got, want)
				}
			})
		}

		// One folder of it: that folder, at its place, and nothing else.
		st, hdr, body := h.do("GET", Prefix+"/snapshots/"+snapID+"/download?format=tar&path=/plugins/", h.token, nil)
		if st != 200 || hdr.Get("Content-Disposition") != `attachment; filename=before_update-`+snapID+`-plugins.tar` || hdr.Get("X-Snapshot-Size-Bytes") != "5" {
			t.Fatalf("download of /plugins: %d, %q, %q", st, hdr.Get("Content-Disposition"), hdr.Get("X-Snapshot-Size-Bytes"))
		}
		dir := t.TempDir()
		cmd := exec.Command(tarBin, "-x", "-p", "-C", dir)
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -x: %v\n%s", err, out)
		}
		if got, want := below(dir), below(filepath.Join(root, "plugins")); !strings.HasPrefix(got, "plugins drwxr-xr-x\n") ||
			strings.ReplaceAll(strings.TrimPrefix(got, "plugins drwxr-xr-x\n"), "plugins/", "") != want {
			t.Errorf("extracted /plugins:\n%s\nwant the server's plugins/:\n%s", got, want)
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download?path=/world/nether", h.token, nil)
		wantError(t, st, body, 404, "FILE_NOT_FOUND", "the snapshot holds nothing at /world/nether")
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download?path=/../etc", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "path")

		// HEAD: the headers, no archive built.
		st, hdr, body = h.do("HEAD", Prefix+"/snapshots/"+snapID+"/download", h.token, nil)
		if st != 200 || len(body) != 0 || hdr.Get("Content-Type") != "application/gzip" || hdr.Get("X-Snapshot-Size-Bytes") != "2600030" {
			t.Errorf("HEAD: %d, %d bytes, Content-Type %q", st, len(body), hdr.Get("Content-Type"))
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download?format=zip", h.token, nil)
		wantError(t, st, body, 400, "VALIDATION_ERROR", "format")
		st, _, body = h.do("GET", Prefix+"/snapshots/snap_notarealid/download", h.token, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download", h.otherTeamToken(), nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		if _, err := db.Write().ExecContext(t.Context(), `UPDATE snapshots SET status = 'failed' WHERE id = $1`, snapID); err != nil {
			t.Fatal(err)
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download", h.token, nil)
		wantError(t, st, body, 409, "CONFLICT", "not ready")
		if _, err := db.Write().ExecContext(t.Context(), `UPDATE snapshots SET status = 'ready' WHERE id = $1`, snapID); err != nil {
			t.Fatal(err)
		}

		// Downloads held open through the service, as long ones would be:
		// one more than the process writes at once is refused (503)
		// before any byte.
		var open []*snapshot.Download
		for range 4 { // snapshot.Options.MaxExports' default
			d, err := h.srv.deps.Snapshots.Export(t.Context(), me.ID, snapID, "")
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, d)
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download", h.token, nil)
		wantError(t, st, body, 503, "UNAVAILABLE", "too many snapshot downloads")
		for _, d := range open[1:] {
			d.Close()
		}

		// A delete while one is open goes ahead (the seed's delete has no
		// 409): the record goes at once, the storage stays until that
		// download ended whole, then goes.
		st, _, body = h.do("DELETE", Prefix+"/snapshots/"+snapID, h.token, nil)
		deletion := map[string]any{"ok": true, "deleted": true, "storage_deleted": false, "storage_cleanup_skipped": true,
			"storage_cleanup_reason": "in_use", "freed_bytes": 0.0, "shared_bytes": 0.0}
		if got := mustJSON(body); st != 200 || !reflect.DeepEqual(got, deletion) {
			t.Fatalf("delete during a download: %d %s, want 200 %v", st, body, deletion)
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download", h.token, nil)
		wantError(t, st, body, 404, "SNAPSHOT_NOT_FOUND", "snapshot")
		var whole bytes.Buffer
		if err := open[0].WriteTo(t.Context(), &whole, snapshot.ExportTar); err != nil {
			t.Fatalf("the download of a snapshot deleted under it: %v", err)
		}
		kept := t.TempDir()
		cmd = exec.Command(tarBin, "-x", "-p", "-C", kept)
		cmd.Stdin = &whole
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -x of the download of a deleted snapshot: %v\n%s", err, out)
		}
		if got := below(kept); got != want {
			t.Errorf("the download of a snapshot deleted under it:\n%s\nwant the server's:\n%s", got, want)
		}
		deadline := time.Now().Add(30 * time.Second)
		for manifests, _ := filepath.Glob(filepath.Join(h.blobDir, "manifests", "*")); len(manifests) > 0; manifests, _ = filepath.Glob(filepath.Join(h.blobDir, "manifests", "*")) {
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the download ended, the deleted snapshot's manifest is still stored: %v", manifests)
			}
			time.Sleep(20 * time.Millisecond)
		}
		snapID = h.readySnapshot(id, "again")

		// The chunks gone, the manifest still there: the manifest is sound,
		// so the answer starts; the transfer is then cut off (before or
		// after the status line reached the client, as buffers go) and the
		// snapshot marked damaged. A client that sends the request again
		// (Go's transport does, by itself, when the connection closed
		// before any byte of the answer) is told so: 409 SNAPSHOT_DAMAGED.
		if err := os.RemoveAll(filepath.Join(h.blobDir, "chunks")); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+Prefix+"/snapshots/"+snapID+"/download?format=tar", nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusConflict {
				t.Errorf("download without chunks: %d, %d bytes read whole; want the transfer cut off", resp.StatusCode, len(data))
			}
		}
		if !strings.Contains(h.logs.String(), "snapshot download cut off") {
			t.Errorf("the cut-off download was not logged")
		}
		st, _, body = h.do("GET", Prefix+"/snapshots/"+snapID+"/download?format=tar", h.token, nil)
		wantError(t, st, body, 409, "SNAPSHOT_DAMAGED", "the snapshot is damaged: data it holds is missing")
	})
}
