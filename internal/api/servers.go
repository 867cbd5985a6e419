package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/validate"
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
	NodeStatus      *string       `json:"node_status"`
	ConfigurationID *string       `json:"configuration_id"`
}

type resourcesJSON struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	UptimeMS    int64   `json:"uptime_ms"`
}

// serverDetailJSON is GET /servers/{id}: the list fields plus limits.
type serverDetailJSON struct {
	serverJSON
	Version      string            `json:"version"`
	MemoryMB     int               `json:"memory_mb"`
	DiskMB       int               `json:"disk_mb"`
	CPUPercent   int               `json:"cpu_percent"`
	Env          map[string]string `json:"env"`
	InstallError *string           `json:"install_error"`
	CreatedAt    int64             `json:"created_at"`
	UpdatedAt    int64             `json:"updated_at"`
}

func toServerJSON(s servers.Server) serverJSON {
	return serverJSON{
		ID: s.ID, Name: s.Name, Status: s.Status, Address: s.Address,
		Resources: resourcesJSON{
			CPU: s.Resources.CPU, MemoryBytes: s.Resources.MemoryBytes,
			DiskBytes: s.Resources.DiskBytes, UptimeMS: s.Resources.UptimeMS,
		},
		Software: s.Software, Node: s.Node, NodeStatus: nodeStatus(s), ConfigurationID: s.ConfigurationID,
	}
}

// nodeStatus is the server's node's status, null when not known.
func nodeStatus(s servers.Server) *string {
	if s.NodeStatus == "" {
		return nil
	}
	return &s.NodeStatus
}

func toServerDetail(s servers.Server) serverDetailJSON {
	env := s.Env
	if env == nil {
		env = map[string]string{}
	}
	return serverDetailJSON{
		serverJSON: toServerJSON(s), Version: s.Version, MemoryMB: s.MemoryMB, DiskMB: s.DiskMB,
		CPUPercent: s.CPUPercent, Env: env, InstallError: s.InstallError, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// serverID reads and checks the {id} path value.
func serverID(r *http.Request) (string, error) {
	raw := r.PathValue("id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return "", newHTTPError(http.StatusBadRequest, codeInvalidServerID, fmt.Sprintf("%q is not a server UUID", raw))
	}
	return id.String(), nil
}

func (s *Server) listServers(w http.ResponseWriter, r *http.Request) error {
	team := principal(r).TeamID
	l, err := s.deps.Servers.Listing(r.Context(), team)
	if err != nil {
		return err
	}
	writeServerList(w, s.lists.get(team, l))
	return nil
}

type createServerRequest struct {
	Name       string            `json:"name"`
	Software   string            `json:"software"`
	Version    string            `json:"version"`
	MemoryMB   int               `json:"memory_mb"`
	DiskMB     int               `json:"disk_mb"`
	CPUPercent int               `json:"cpu_percent"`
	Env        map[string]string `json:"env"`
	// Node is the node asked for; absent (or null) lets placement choose.
	Node *string `json:"node"`
}

func (s *Server) createServer(w http.ResponseWriter, r *http.Request) error {
	var req createServerRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var node string
	if req.Node != nil {
		if *req.Node == "" {
			return validationf("node", "must be a node's name; leave node out to let Kiln choose one")
		}
		node = *req.Node
	}
	sv, err := s.deps.Servers.Create(r.Context(), principal(r).TeamID, servers.NewServer{
		Name: req.Name, Software: req.Software, Version: req.Version, MemoryMB: req.MemoryMB,
		DiskMB: req.DiskMB, CPUPercent: req.CPUPercent, Env: req.Env, Node: node,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ok": true, "server": toServerDetail(sv)})
	return nil
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	sv, err := s.deps.Servers.Get(r.Context(), principal(r).TeamID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": toServerDetail(sv)})
	return nil
}

type updateServerRequest struct {
	// Env maps a variable to its new value, or to null to unset it.
	Env map[string]*string `json:"env"`
}

// updateServer is PATCH /servers/{id}: a merge of env (null unsets a
// variable), effective at the next start.
func (s *Server) updateServer(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req updateServerRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Env == nil {
		return validationf("env", "is required: an object of variables to set (a string) or unset (null)")
	}
	sv, err := s.deps.Servers.SetEnv(r.Context(), principal(r).TeamID, id, req.Env)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "server": toServerDetail(sv)})
	return nil
}

func (s *Server) deleteServer(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	if err := s.deps.Servers.Delete(r.Context(), principal(r).TeamID, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, okBody)
	return nil
}

var okBody = map[string]bool{"ok": true}

// serverAction runs a route on one server that takes a JSON body and
// answers {"ok":true} with status: the server id, then the body (strictly)
// are checked before fn runs with the caller's team.
func serverAction[Req any](w http.ResponseWriter, r *http.Request, status int, fn func(teamID, id string, req *Req) error) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req Req
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := fn(principal(r).TeamID, id, &req); err != nil {
		return err
	}
	writeJSON(w, status, okBody)
	return nil
}

func (s *Server) powerServer(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusAccepted, func(teamID, id string, req *struct {
		Action string `json:"action"`
	}) error {
		return s.deps.Servers.Power(r.Context(), teamID, id, req.Action)
	})
}

func (s *Server) sendCommand(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Command string `json:"command"`
	}) error {
		return s.deps.Servers.Command(r.Context(), teamID, id, req.Command)
	})
}

// intQuery reads an optional integer query parameter within [lo, hi]
// (def when absent or empty; given twice is refused, as by query).
func intQuery(r *http.Request, name string, def, lo, hi int) (int, error) {
	raw, err := query(r, name, false, "")
	if err != nil {
		return 0, err
	}
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		return 0, validate.Errorf(name, "must be an integer from %d to %d", lo, hi)
	}
	return n, nil
}

func (s *Server) getConsole(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	n, err := intQuery(r, "size", 100, 1, 500)
	if err != nil {
		return err
	}
	lines, err := s.deps.Servers.Console(r.Context(), principal(r).TeamID, id, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"lines": lines, "count": len(lines)})
	return nil
}

// Console streams (doc.go): a keep-alive comment every StreamHeartbeat,
// when the token and the server are also checked again; at most
// StreamMaxLife long.
const (
	defaultStreamHeartbeat = 15 * time.Second
	defaultStreamMaxLife   = 24 * time.Hour
)

// streamConsole is Server-Sent Events: "line" and "status" events, and a
// comment every StreamHeartbeat so proxies keep the connection open. It
// ends when the client goes away or stops reading, the server is deleted,
// the token is revoked, or StreamMaxLife has passed (a comment says which
// of the last three; the client reconnects).
func (s *Server) streamConsole(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	team := principal(r).TeamID
	events, stop, err := s.deps.Servers.Stream(r.Context(), team, id)
	if err != nil {
		return err
	}
	defer stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// send writes one event under its own write deadline: a client that
	// stops reading is cut off, however long the stream has lived.
	send := func(text string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.transfer.timeFor(int64(len(text)))))
		if _, err := io.WriteString(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(": streaming the console\n\n") {
		return nil
	}
	token, _ := bearerToken(r)
	heartbeat := time.NewTicker(s.cfg.StreamHeartbeat)
	defer heartbeat.Stop()
	maxLife := time.NewTimer(s.cfg.StreamMaxLife)
	defer maxLife.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-maxLife.C:
			send(": the stream reached its maximum life; reconnect\n\n")
			return nil
		case <-heartbeat.C:
			if why := s.streamEnds(r.Context(), token, team, id); why != "" {
				send(": " + why + "\n\n")
				return nil
			}
			if !send(": keep-alive\n\n") {
				return nil
			}
		case e, ok := <-events:
			if !ok {
				return nil // the server was deleted here, or the client fell behind
			}
			if !send("event: " + e.Kind + "\ndata: " + e.Data + "\n\n") {
				return nil
			}
		}
	}
}

// streamEnds says why a console stream must end now, "" when it may go
// on: its token no longer authenticates (revoked, perhaps by kiln admin in
// another process), or its server is gone (perhaps deleted through another
// replica). A failure to check (the database unreachable) ends nothing.
func (s *Server) streamEnds(ctx context.Context, token, teamID, id string) string {
	if _, err := s.deps.Auth.Authenticate(ctx, token); errors.Is(err, auth.ErrInvalidToken) {
		return "the token was revoked"
	}
	if _, err := s.deps.Servers.Get(ctx, teamID, id); errors.Is(err, servers.ErrNotFound) {
		return "the server was deleted"
	}
	return ""
}

func (s *Server) reinstallServer(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusAccepted, func(teamID, id string, req *struct {
		Software string `json:"software"`
		Version  string `json:"version"`
	}) error {
		return s.deps.Servers.Reinstall(r.Context(), teamID, id, req.Software, req.Version)
	})
}
