package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/servers"
)

// serverJSON is the seed's Server list item plus api.md §3's extra fields.
type serverJSON struct {
	ID              string        `json:"id"`
	Name            string        `json:"name"`
	Status          string        `json:"status"`
	Address         string        `json:"address"`
	Resources       resourcesJSON `json:"resources"`
	Software        string        `json:"software"`
	Node            string        `json:"node"`
	ConfigurationID *string       `json:"configuration_id"`
}

type resourcesJSON struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	UptimeMS    int64   `json:"uptime_ms"`
}

func toServerJSON(s servers.Server) serverJSON {
	return serverJSON{
		ID: s.ID, Name: s.Name, Status: s.Status, Address: s.Address,
		Resources: resourcesJSON{
			CPU: s.Resources.CPU, MemoryBytes: s.Resources.MemoryBytes,
			DiskBytes: s.Resources.DiskBytes, UptimeMS: s.Resources.UptimeMS,
		},
		Software: s.Software, Node: s.Node, ConfigurationID: s.ConfigurationID,
	}
}

func (s *Server) listServers(w http.ResponseWriter, r *http.Request) error {
	list, err := s.deps.Servers.List(r.Context(), principal(r).TeamID)
	if err != nil {
		return err
	}
	out := struct {
		Servers []serverJSON `json:"servers"`
		Count   int          `json:"count"`
	}{Servers: make([]serverJSON, len(list)), Count: len(list)}
	for i, sv := range list {
		out.Servers[i] = toServerJSON(sv)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
