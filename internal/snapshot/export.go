package snapshot

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// ExportFormat is the archive a snapshot is downloaded as.
type ExportFormat string

const (
	// ExportTarGz is the default: every panel's backups are tar.gz, and
	// every system opens it (Windows' own tar and 7-Zip included).
	ExportTarGz ExportFormat = "tar.gz"
	// ExportTarZst is smaller and several times faster to make.
	ExportTarZst ExportFormat = "tar.zst"
	// ExportTar is not compressed (the region files of a world hardly
	// compress: zlib already did).
	ExportTar ExportFormat = "tar"
)

// ParseExportFormat returns the format named s ("" is ExportTarGz).
func ParseExportFormat(s string) (ExportFormat, error) {
	switch f := ExportFormat(strings.ToLower(s)); f {
	case "":
		return ExportTarGz, nil
	case ExportTarGz, ExportTarZst, ExportTar:
		return f, nil
	}
	return "", fmt.Errorf("must be one of tar.gz, tar.zst, tar; got %q", s)
}

// ContentType is the media type of the format.
func (f ExportFormat) ContentType() string {
	switch f {
	case ExportTarZst:
		return "application/zstd"
	case ExportTar:
		return "application/x-tar"
	}
	return "application/gzip"
}

// The compressors' settings: a download's memory is its chunks (engine,
// 16 MiB) plus these, per download (Options.MaxExports at once). pgzip
// holds a block of input and one of output per goroutine; zstd a window
// and its blocks per goroutine. Measured on a 1 GiB world through kiln
// serve (docs/benchmarks.md).
const (
	exportGzipBlock  = 1 << 20
	exportZstdWindow = 1 << 20
)

// ErrExportsBusy: Options.MaxExports downloads are being written already.
var ErrExportsBusy = errors.New("too many snapshot downloads are running on this node; try again in a minute")

// Download is one of a team's ready snapshots opened for download: its
// manifest read and checked whole. WriteTo writes it; Close lets go of
// its slot (WriteTo does too).
type Download struct {
	Snapshot Snapshot
	s        *Service
	only     string
	ex       *engine.Export
	slots    chan struct{}
	held     bool
	read     *reader // a delete meanwhile leaves the storage to Close
}

// Export opens one of the team's snapshots for download, taking one of
// the Options.MaxExports slots: all of it, or only the path only (clean,
// relative: files.Clean's) and what is under it. Errors: ErrNotFound,
// ErrNotReady, ErrExportsBusy, files.ErrNotFound (nothing at only),
// *DamagedError (its manifest missing or corrupt, or marked damaged and
// still so: integrity.go), the store's.
func (s *Service) Export(ctx context.Context, teamID, id, only string) (*Download, error) {
	snap, err := s.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if snap.Status != StatusReady {
		return nil, ErrNotReady
	}
	select {
	case s.exports <- struct{}{}:
	default:
		return nil, ErrExportsBusy
	}
	d := &Download{Snapshot: snap, s: s, only: only, slots: s.exports, held: true}
	if d.read, err = s.beginRead(ctx, snap.UUID); err != nil {
		d.Close()
		return nil, err
	}
	if err := s.usable(ctx, snap, only); err != nil {
		d.Close()
		return nil, err
	}
	d.ex, err = engine.OpenExport(ctx, s.store, manifest.Key(snap.UUID), only)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("download snapshot %s: %w", id, s.damaged(ctx, snap, err))
	}
	return d, nil
}

// Close lets go of the download's slot and of the snapshot (a delete
// while it was read leaves the storage to the last reader: reads.go); it
// may be called more than once.
func (d *Download) Close() {
	if d.held {
		d.held = false
		<-d.slots
	}
	if d.read != nil {
		d.read.end()
	}
}

// SizeBytes is the content of the snapshot's files (the archive holds
// that, and headers, before compression).
func (d *Download) SizeBytes() int64 { return d.ex.SizeBytes }

// WriteTo writes the snapshot to w as an archive of format f, then lets
// go of the slot. An error leaves w with a cut archive (a chunk missing
// or corrupt, w failing, ctx ending): the caller must not present it as
// whole. A chunk found missing or corrupt marks the snapshot damaged
// (and every other one referencing it) and a corrupt one is moved aside
// (*DamagedError); a whole download of a snapshot marked damaged drops
// the mark.
func (d *Download) WriteTo(ctx context.Context, w io.Writer, f ExportFormat) error {
	defer d.Close()
	err := d.writeTo(ctx, w, f)
	if err != nil {
		return d.s.damaged(ctx, d.Snapshot, err)
	}
	if d.only == "" || d.only == "." {
		d.s.clearDamage(context.WithoutCancel(ctx), d.Snapshot.UUID)
	}
	return nil
}

func (d *Download) writeTo(ctx context.Context, w io.Writer, f ExportFormat) error {
	var (
		zw  io.WriteCloser
		err error
	)
	switch f {
	case ExportTar:
		return d.ex.WriteTar(ctx, w, 0)
	case ExportTarZst:
		zw, err = zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.NumCPU()),
			zstd.WithWindowSize(exportZstdWindow))
	default:
		var gz *pgzip.Writer
		gz, err = pgzip.NewWriterLevel(w, gzip.BestSpeed)
		if err == nil {
			err = gz.SetConcurrency(exportGzipBlock, runtime.NumCPU())
		}
		zw = gz
	}
	if err != nil {
		return fmt.Errorf("download snapshot %s: %w", d.Snapshot.ID, err)
	}
	if err := d.ex.WriteTar(ctx, zw, 0); err != nil {
		zw.Close()
		return fmt.Errorf("download snapshot %s: %w", d.Snapshot.ID, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("download snapshot %s: %w", d.Snapshot.ID, err)
	}
	return nil
}
