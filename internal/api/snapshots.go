package api

import (
	"errors"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/validate"
)

// snapshotJSON is a snapshot: the seed's five fields and the rest.
type snapshotJSON struct {
	SnapshotID     string  `json:"snapshot_id"`
	SnapshotUUID   string  `json:"snapshot_uuid"`
	SourceServerID string  `json:"source_server_id"`
	Name           string  `json:"name"`
	Status         string  `json:"status"`
	Ignore         string  `json:"ignore"`
	Error          *string `json:"error"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	SizeBytes      *int64  `json:"size_bytes"`
	StoredBytes    *int64  `json:"stored_bytes"`
	CreatedAt      int64   `json:"created_at"`
	StartedAt      *int64  `json:"started_at"`
	CompletedAt    *int64  `json:"completed_at"`
	Damage         *string `json:"damage"`
	DamagedAt      *int64  `json:"damaged_at"`
}

func toSnapshotJSON(s snapshot.Snapshot) snapshotJSON {
	return snapshotJSON{SnapshotID: s.ID, SnapshotUUID: s.UUID, SourceServerID: s.SourceServerID, Name: s.Name,
		Status: s.Status, Ignore: s.Ignore, Error: s.Error, BytesDone: s.BytesDone, BytesTotal: s.BytesTotal,
		SizeBytes: s.SizeBytes, StoredBytes: s.StoredBytes, CreatedAt: s.CreatedAt, StartedAt: s.StartedAt,
		CompletedAt: s.CompletedAt, Damage: s.Damage, DamagedAt: s.DamagedAt}
}

// uuidField checks a UUID in a body or query field.
func uuidField(c *validate.Collector, field, v string) string {
	u, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		c.Add(field, "must be a server UUID")
		return ""
	}
	return u.String()
}

// snapshotID is the path's snapshot id; one that cannot be a snapshot's
// is not found without a look-up.
func snapshotID(r *http.Request) (string, error) {
	id := r.PathValue("snapshotId")
	if !ids.HasPrefix(id, "snap") {
		return "", snapshot.ErrNotFound
	}
	return id, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		SourceServerID *string `json:"source_server_id"`
		Name           *string `json:"name"`
		Ignore         string  `json:"ignore"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var c validate.Collector
	var serverID, name string
	if req.SourceServerID == nil {
		c.Add("source_server_id", "is required")
	} else {
		serverID = uuidField(&c, "source_server_id", *req.SourceServerID)
	}
	if req.Name == nil {
		c.Add("name", "is required")
	} else {
		name = *req.Name
	}
	if err := c.Err(); err != nil {
		return err
	}
	snap, err := s.deps.Snapshots.Create(r.Context(), principal(r).TeamID, serverID, name, req.Ignore)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, toSnapshotJSON(snap))
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	var serverID string
	if v := r.URL.Query().Get("server_id"); v != "" {
		var c validate.Collector
		serverID = uuidField(&c, "server_id", v)
		if err := c.Err(); err != nil {
			return err
		}
	}
	limit, cursor, err := pageQuery(r, snapshot.MaxList)
	if err != nil {
		return err
	}
	list, next, err := s.deps.Snapshots.Page(r.Context(), principal(r).TeamID, serverID, limit, cursor)
	if err != nil {
		return err
	}
	out := struct {
		Snapshots  []snapshotJSON `json:"snapshots"`
		Count      int            `json:"count"`
		NextCursor string         `json:"next_cursor"`
	}{Snapshots: make([]snapshotJSON, len(list)), Count: len(list), NextCursor: next}
	for i, sn := range list {
		out.Snapshots[i] = toSnapshotJSON(sn)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
	if err != nil {
		return err
	}
	snap, err := s.deps.Snapshots.Get(r.Context(), principal(r).TeamID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshot": toSnapshotJSON(snap)})
	return nil
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
	if err != nil {
		return err
	}
	var req struct {
		ServerID *string `json:"server_id"`
		Path     *string `json:"path"`
	}
	// The body is optional: none restores into the snapshot's source.
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	var target string
	if req.ServerID != nil {
		var c validate.Collector
		target = uuidField(&c, "server_id", *req.ServerID)
		if err := c.Err(); err != nil {
			return err
		}
	}
	only := "."
	if req.Path != nil {
		if only, err = files.Clean("path", *req.Path); err != nil {
			return err
		}
	}
	rec, err := s.deps.Snapshots.RestorePath(r.Context(), principal(r).TeamID, id, target, only)
	if err != nil {
		return notInSnapshot(err, only)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ok": true, "restore": toRestoreJSON(rec)})
	return nil
}

// restoreJSON is a restore's record.
type restoreJSON struct {
	RestoreID   string  `json:"restore_id"`
	SnapshotID  string  `json:"snapshot_id"`
	ServerID    string  `json:"server_id"`
	Path        *string `json:"path"`
	Status      string  `json:"status"`
	Error       *string `json:"error"`
	BytesDone   int64   `json:"bytes_done"`
	BytesTotal  int64   `json:"bytes_total"`
	CreatedAt   int64   `json:"created_at"`
	StartedAt   *int64  `json:"started_at"`
	CompletedAt *int64  `json:"completed_at"`
}

func toRestoreJSON(r snapshot.RestoreRecord) restoreJSON {
	var p *string
	if r.Path != nil {
		abs := "/" + *r.Path
		p = &abs
	}
	return restoreJSON{RestoreID: r.ID, SnapshotID: r.SnapshotID, ServerID: r.ServerID, Path: p, Status: r.Status,
		Error: r.Error, BytesDone: r.BytesDone, BytesTotal: r.BytesTotal, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
		CompletedAt: r.CompletedAt}
}

func (s *Server) getRestore(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("restoreId")
	if !ids.HasPrefix(id, "rst") {
		return snapshot.ErrRestoreNotFound
	}
	rec, err := s.deps.Snapshots.GetRestore(r.Context(), principal(r).TeamID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"restore": toRestoreJSON(rec)})
	return nil
}

func (s *Server) listRestores(w http.ResponseWriter, r *http.Request) error {
	var c validate.Collector
	var serverID, snapshotID string
	q := r.URL.Query()
	if v := q.Get("server_id"); v != "" {
		serverID = uuidField(&c, "server_id", v)
	}
	if v := q.Get("snapshot_id"); v != "" {
		if !ids.HasPrefix(v, "snap") {
			c.Add("snapshot_id", "must be a snapshot id (snap_…)")
		}
		snapshotID = v
	}
	if err := c.Err(); err != nil {
		return err
	}
	list, err := s.deps.Snapshots.ListRestores(r.Context(), principal(r).TeamID, serverID, snapshotID)
	if err != nil {
		return err
	}
	out := make([]restoreJSON, len(list))
	for i, rec := range list {
		out[i] = toRestoreJSON(rec)
	}
	writeJSON(w, http.StatusOK, map[string]any{"restores": out, "count": len(out)})
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
	if err != nil {
		return err
	}
	d, err := s.deps.Snapshots.Delete(r.Context(), principal(r).TeamID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "deleted": d.Deleted, "storage_deleted": d.StorageDeleted,
		"storage_cleanup_skipped": d.CleanupSkipped, "storage_cleanup_reason": d.CleanupReason,
		"freed_bytes": d.FreedBytes, "shared_bytes": d.SharedBytes})
	return nil
}

// downloadSnapshot streams a ready snapshot as an archive (?format=
// tar.gz, the default, tar.zst or tar), built from its chunks as it is
// sent: nothing is staged on disk. The manifest is checked whole before
// the status line; a chunk found missing or corrupt after it cuts the
// response off (the client sees a broken transfer, never a short archive
// that looks whole).
func (s *Server) downloadSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
	if err != nil {
		return err
	}
	v, err := query(r, "format", false, "")
	if err != nil {
		return err
	}
	format, err := snapshot.ParseExportFormat(v)
	if err != nil {
		return validationf("format", "%s", err)
	}
	p, err := query(r, "path", false, "/")
	if err != nil {
		return err
	}
	only, err := files.Clean("path", p)
	if err != nil {
		return err
	}
	d, err := s.deps.Snapshots.Export(r.Context(), principal(r).TeamID, id, only)
	if err != nil {
		return notInSnapshot(err, only)
	}
	defer d.Close()
	name := d.Snapshot.Name + "-" + d.Snapshot.ID
	if only != "." {
		name += "-" + path.Base(only)
	}
	name = strings.NewReplacer("/", "_", "\\", "_").Replace(name) + "." + string(format)
	h := w.Header()
	h.Set("Content-Type", format.ContentType())
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Snapshot-Size-Bytes", strconv.FormatInt(d.SizeBytes(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil // the headers only: the archive is not built
	}
	if err := d.WriteTo(r.Context(), w, format); err != nil {
		if r.Context().Err() == nil {
			s.log.WarnContext(r.Context(), "snapshot download cut off", "snapshot_id", id, "err", err)
		}
		panic(http.ErrAbortHandler) // no terminating chunk: the client sees the failure
	}
	return nil
}

// notInSnapshot names the path a snapshot does not hold (files.ErrNotFound
// from a download or restore of one path) in its 404.
func notInSnapshot(err error, only string) error {
	if errors.Is(err, files.ErrNotFound) {
		return newHTTPError(http.StatusNotFound, codeFileNotFound, "the snapshot holds nothing at /"+only)
	}
	return err
}
