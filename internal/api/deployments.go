package api

import (
	"net/http"
	"strconv"

	"github.com/kilnhq/kiln/internal/deploy"
)

// configurationJSON is the seed's Configuration; latest_pushed_* are null
// before the first push.
type configurationJSON struct {
	ID                        string  `json:"id"`
	TeamID                    string  `json:"team_id"`
	Name                      string  `json:"name"`
	Description               string  `json:"description"`
	YAML                      string  `json:"yaml"`
	SpecHash                  string  `json:"spec_hash"`
	ResourceCount             int     `json:"resource_count"`
	CreatedAt                 int64   `json:"created_at"`
	UpdatedAt                 int64   `json:"updated_at"`
	LatestPushedVersionID     *string `json:"latest_pushed_version_id"`
	LatestPushedVersionNumber *int    `json:"latest_pushed_version_number"`
	LatestPushedSpecHash      *string `json:"latest_pushed_spec_hash"`
	LatestPushedAt            *int64  `json:"latest_pushed_at"`
}

func toConfigurationJSON(c deploy.Configuration) configurationJSON {
	out := configurationJSON{
		ID: c.ID, TeamID: c.TeamID, Name: c.Name, Description: c.Description, YAML: c.YAML,
		SpecHash: c.SpecHash, ResourceCount: c.ResourceCount, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
	}
	if v := c.Latest; v != nil {
		out.LatestPushedVersionID, out.LatestPushedVersionNumber = &v.ID, &v.Number
		out.LatestPushedSpecHash, out.LatestPushedAt = &v.SpecHash, &v.PushedAt
	}
	return out
}

// versionJSON is the seed's ConfigurationVersion.
type versionJSON struct {
	ID              string  `json:"id"`
	ConfigurationID string  `json:"configuration_id"`
	VersionNumber   int     `json:"version_number"`
	YAML            string  `json:"yaml"`
	SpecHash        string  `json:"spec_hash"`
	ResourceCount   int     `json:"resource_count"`
	PushedBy        string  `json:"pushed_by"`
	PushedAt        int64   `json:"pushed_at"`
	PushMessage     string  `json:"push_message"`
	BaseVersionID   *string `json:"base_version_id"`
}

func toVersionJSON(v deploy.Version) versionJSON {
	out := versionJSON{
		ID: v.ID, ConfigurationID: v.ConfigurationID, VersionNumber: v.Number, YAML: v.YAML, SpecHash: v.SpecHash,
		ResourceCount: v.ResourceCount, PushedBy: v.PushedBy, PushedAt: v.PushedAt, PushMessage: v.PushMessage,
	}
	if v.BaseVersionID != "" {
		out.BaseVersionID = &v.BaseVersionID
	}
	return out
}

func (s *Server) listConfigurations(w http.ResponseWriter, r *http.Request) error {
	list, err := s.deps.Deploy.List(r.Context(), principal(r).TeamID)
	if err != nil {
		return err
	}
	out := make([]configurationJSON, len(list))
	for i, c := range list {
		out[i] = toConfigurationJSON(c)
	}
	writeJSON(w, http.StatusOK, map[string]any{"configurations": out, "count": len(out)})
	return nil
}

func (s *Server) createConfiguration(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name        string `json:"name"`
		YAML        string `json:"yaml"`
		Description string `json:"description"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	c, err := s.deps.Deploy.Create(r.Context(), principal(r).TeamID, req.Name, req.Description, req.YAML)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "configuration": toConfigurationJSON(c)})
	return nil
}

func (s *Server) getConfiguration(w http.ResponseWriter, r *http.Request) error {
	c, err := s.deps.Deploy.Get(r.Context(), principal(r).TeamID, r.PathValue("configurationId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"configuration": toConfigurationJSON(c)})
	return nil
}

func (s *Server) updateConfiguration(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name        *string `json:"name"`
		Description *string `json:"description"`
		YAML        *string `json:"yaml"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	c, err := s.deps.Deploy.Update(r.Context(), principal(r).TeamID, r.PathValue("configurationId"),
		deploy.Patch{Name: req.Name, Description: req.Description, YAML: req.YAML})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "configuration": toConfigurationJSON(c)})
	return nil
}

func (s *Server) deleteConfiguration(w http.ResponseWriter, r *http.Request) error {
	ctx, team, id := r.Context(), principal(r).TeamID, r.PathValue("configurationId")
	if err := s.deps.Deploy.Delete(ctx, team, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "deleted": true})
	return nil
}

func (s *Server) pushConfiguration(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		PushMessage string `json:"push_message"`
	}
	// The body is optional (the seed marks it so): none means no message.
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	p := principal(r)
	v, created, err := s.deps.Deploy.Push(r.Context(), p.TeamID, r.PathValue("configurationId"), p.Actor(), req.PushMessage)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "created": created, "version": toVersionJSON(v)})
	return nil
}

func (s *Server) listConfigurationVersions(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r, deploy.MaxPage)
	if err != nil {
		return err
	}
	vs, next, err := s.deps.Deploy.Versions(r.Context(), principal(r).TeamID, r.PathValue("configurationId"), limit, cursor)
	if err != nil {
		return err
	}
	out := make([]versionJSON, len(vs))
	for i, v := range vs {
		out[i] = toVersionJSON(v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": out, "count": len(out), "next_cursor": next})
	return nil
}

func (s *Server) getConfigurationVersion(w http.ResponseWriter, r *http.Request) error {
	n, err := strconv.Atoi(r.PathValue("versionNumber"))
	if err != nil || n < 1 {
		return validationf("versionNumber", "must be a version number (1, 2, …)")
	}
	v, err := s.deps.Deploy.Version(r.Context(), principal(r).TeamID, r.PathValue("configurationId"), n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": toVersionJSON(v)})
	return nil
}

func (s *Server) diffConfiguration(w http.ResponseWriter, r *http.Request) error {
	var nums [2]int
	for i, name := range []string{"from", "to"} {
		v, err := query(r, name, false, "")
		if err != nil {
			return err
		}
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return validationf(name, "must be a version number (1, 2, …)")
		}
		nums[i] = n
	}
	d, err := s.deps.Deploy.Diff(r.Context(), principal(r).TeamID, r.PathValue("configurationId"), nums[0], nums[1])
	if err != nil {
		return err
	}
	var from *int
	if d.From > 0 {
		from = &d.From
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "from": from, "to": d.To, "has_changes": d.Added+d.Removed > 0,
		"diff": map[string]any{
			"unified": d.Unified, "truncated": d.Truncated,
			"stats": map[string]int{"added": d.Added, "removed": d.Removed},
		},
	})
	return nil
}
