package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/sftp"
)

// sftpCredentialsJSON is the seed's SFTP credentials.
type sftpCredentialsJSON struct {
	Username         string `json:"username"`
	Password         string `json:"password"`
	ComputedUsername string `json:"computedUsername"`
	Host             string `json:"host"`
	Port             int    `json:"port"`
	URI              string `json:"uri"`
}

func toSFTPJSON(c sftp.Credentials) sftpCredentialsJSON {
	return sftpCredentialsJSON{Username: c.Username, Password: c.Password, ComputedUsername: c.ComputedUsername,
		Host: c.Host, Port: c.Port, URI: c.URI}
}

// sftpCredentials answers GET and POST /servers/{id}/sftp: get-or-create,
// and with POST {"rotate": true} a new password.
func (s *Server) sftpCredentials(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req struct {
		Rotate bool `json:"rotate"`
	}
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	p := principal(r)
	c, err := s.deps.SFTP.Credentials(r.Context(), p.TeamID, p.TokenID, p.Label, id, req.Rotate)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSFTPJSON(c))
	return nil
}
