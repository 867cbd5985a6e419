package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/validate"
)

// secretJSON is what the API says of a team secret: never its value.
type secretJSON struct {
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
}

func toSecretJSON(sc secrets.Secret) secretJSON {
	return secretJSON{Name: sc.Name, CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	list, err := s.deps.Secrets.List(r.Context(), principal(r).TeamID)
	if err != nil {
		return err
	}
	out := make([]secretJSON, len(list))
	for i, sc := range list {
		out[i] = toSecretJSON(sc)
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": out, "count": len(out)})
	return nil
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Value *string `json:"value"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Value == nil {
		return validate.Errorf("value", "is required (1 to %d bytes)", secrets.MaxValue)
	}
	sc, created, err := s.deps.Secrets.Put(r.Context(), principal(r).TeamID, r.PathValue("name"), *req.Value)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "created": created, "secret": toSecretJSON(sc)})
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	if err := s.deps.Secrets.Delete(r.Context(), principal(r).TeamID, r.PathValue("name")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "deleted": true})
	return nil
}
