package snapshot

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestExportSlots: at most Options.MaxExports downloads at once (the next
// is ErrExportsBusy until one is written or closed); another team's
// snapshot is not found; a tar download holds the server's files.
func TestExportSlots(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	e.svc.exports = make(chan struct{}, 2) // MaxExports 2
	sv := e.server("dl", map[string]string{"server.properties": "motd=x\n", "world/level.dat": "level"})
	snap := e.take(sv.ID, "dl", "")

	if _, err := e.svc.Export(t.Context(), "team_b", snap.ID, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("another team's Export = %v, want ErrNotFound", err)
	}
	a, err := e.svc.Export(t.Context(), e.team, snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.svc.Export(t.Context(), e.team, snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Export(t.Context(), e.team, snap.ID, ""); !errors.Is(err, ErrExportsBusy) {
		t.Fatalf("a third Export with 2 slots = %v, want ErrExportsBusy", err)
	}
	a.Close()
	a.Close() // a second Close gives back nothing more
	c, err := e.svc.Export(t.Context(), e.team, snap.ID, "")
	if err != nil {
		t.Fatalf("Export after a Close: %v", err)
	}
	if _, err := e.svc.Export(t.Context(), e.team, snap.ID, ""); !errors.Is(err, ErrExportsBusy) {
		t.Fatalf("Export with both slots taken again = %v, want ErrExportsBusy", err)
	}
	var buf bytes.Buffer
	if err := b.WriteTo(t.Context(), &buf, ExportTar); err != nil {
		t.Fatal(err)
	}
	got := untar(t, &buf)
	if got["server.properties"] != "motd=x\n" || got["world/level.dat"] != "level" || got["world/"] != "" {
		t.Errorf("the tar holds %q", got)
	}
	// WriteTo gave its slot back.
	d, err := e.svc.Export(t.Context(), e.team, snap.ID, "")
	if err != nil {
		t.Fatalf("Export after a WriteTo: %v", err)
	}
	c.Close()
	d.Close()
}

// untar reads a tar stream into name → content.
func untar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	got := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = string(data)
	}
}

// untarZst reads a tar.zst into name → content.
func untarZst(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	return untar(t, zr)
}
