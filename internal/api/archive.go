package api

import (
	"net/http"
)

func (s *Server) compressFiles(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req struct {
		Root   string   `json:"root"`
		Files  []string `json:"files"`
		Format string   `json:"format"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	e, err := s.deps.Archives.Compress(r.Context(), principal(r).TeamID, id, req.Root, req.Files, req.Format)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "archive": toFileEntry(e)})
	return nil
}

func (s *Server) decompressFile(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Root string `json:"root"`
		File string `json:"file"`
	}) error {
		return s.deps.Archives.Decompress(r.Context(), teamID, id, req.Root, req.File)
	})
}
