package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/pull"
)

// downloadJSON is the seed's RemoteDownload plus where the file goes and
// its state.
type downloadJSON struct {
	Identifier string  `json:"identifier"`
	URL        string  `json:"url"`
	Progress   float64 `json:"progress"`
	Size       int64   `json:"size"`
	Error      *string `json:"error"`
	File       string  `json:"file"`
	Status     string  `json:"status"`
	CreatedAt  int64   `json:"created_at"`
	FinishedAt *int64  `json:"finished_at"`
}

func toDownloadJSON(d pull.Download) downloadJSON {
	out := downloadJSON{
		Identifier: d.ID, URL: d.URL, Progress: d.Progress(), Size: d.Size, File: d.File(),
		Status: string(d.Status), CreatedAt: d.CreatedAt,
	}
	if d.Error != "" {
		out.Error = &d.Error
	}
	if d.FinishedAt != 0 {
		out.FinishedAt = &d.FinishedAt
	}
	return out
}

func (s *Server) startPull(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req struct {
		URL       string `json:"url"`
		Directory string `json:"directory"`
		Filename  string `json:"filename"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	d, err := s.deps.Pulls.Start(r.Context(), principal(r).TeamID, id, req.URL, req.Directory, req.Filename)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ok": true, "download": toDownloadJSON(d)})
	return nil
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	list, err := s.deps.Pulls.List(r.Context(), principal(r).TeamID, id)
	if err != nil {
		return err
	}
	out := struct {
		Downloads []downloadJSON `json:"downloads"`
		Count     int            `json:"count"`
	}{Downloads: make([]downloadJSON, len(list)), Count: len(list)}
	for i, d := range list {
		out.Downloads[i] = toDownloadJSON(d)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) cancelPull(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	if _, err := s.deps.Pulls.Cancel(r.Context(), principal(r).TeamID, id, r.PathValue("downloadId")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, okBody)
	return nil
}
