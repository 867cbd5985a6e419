package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/modcatalog"
)

// The mod catalog routes pass the query as it came: internal/modcatalog
// validates every parameter (and refuses unknown ones) before it calls an
// upstream, and answers our normalized shapes.

func (s *Server) searchCurseForge(w http.ResponseWriter, r *http.Request) error {
	out, err := s.deps.Catalogs.SearchCurseForge(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getCurseForgeProject(w http.ResponseWriter, r *http.Request) error {
	out, err := s.deps.Catalogs.CurseForgeProject(r.Context(), r.PathValue("projectId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listCurseForgeVersions(w http.ResponseWriter, r *http.Request) error {
	out, err := s.deps.Catalogs.CurseForgeVersions(r.Context(), r.PathValue("projectId"), r.URL.Query())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) searchModrinth(w http.ResponseWriter, r *http.Request) error {
	out, err := s.deps.Catalogs.SearchModrinth(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listModrinthVersions(w http.ResponseWriter, r *http.Request) error {
	out, err := s.deps.Catalogs.ModrinthProjectVersions(r.Context(), r.PathValue("slug"), r.URL.Query())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// installMod answers POST /servers/{id}/mods: the catalog's file,
// checked against the server, downloaded through the remote downloads.
func (s *Server) installMod(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req modcatalog.InstallRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	res, err := s.deps.Mods.Install(r.Context(), principal(r).TeamID, id, req)
	if err != nil {
		return err
	}
	deps := res.Dependencies
	if deps == nil {
		deps = []modcatalog.Dependency{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ok": true, "download": toDownloadJSON(res.Download), "dependencies": deps})
	return nil
}

// installModpack answers POST /servers/{id}/modpack.
func (s *Server) installModpack(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req modcatalog.ModpackRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	in, err := s.deps.Modpacks.Install(r.Context(), principal(r).TeamID, id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ok": true, "install": in})
	return nil
}

// getModpackInstall answers GET /servers/{id}/modpack/{installId}.
func (s *Server) getModpackInstall(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	in, err := s.deps.Modpacks.Get(r.Context(), principal(r).TeamID, id, r.PathValue("installId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "install": in})
	return nil
}
