package noderpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/gameserver"
)

// PathRecords prefixes the records' routes on the node endpoint.
const PathRecords = "/v1/records/servers"

// RecordsClient is gameserver.Records kept by the control plane: the
// agent's Host reads and writes its servers' records through it, over the
// agent's mutual-TLS client to the node endpoint (Base:
// https://HOST:PORT, kiln serve --cluster-addr).
type RecordsClient struct {
	// Client is the agent's client of the node endpoint at each call (a
	// renewal of its certificate replaces it).
	Client func() *http.Client
	Base   string
}

var _ gameserver.Records = (*RecordsClient)(nil)

func (c *RecordsClient) call(ctx context.Context, method, path string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Client().Do(req)
	if err != nil {
		return fmt.Errorf("the control plane's records: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("the control plane's records: %w", err)
	}
	return nil
}

func serverPath(id, what string) string {
	p := PathRecords + "/" + url.PathEscape(id)
	if what != "" {
		p += "/" + what
	}
	return p
}

// Server reads one of this node's servers.
func (c *RecordsClient) Server(ctx context.Context, id string) (gameserver.Record, error) {
	var r gameserver.Record
	err := c.call(ctx, http.MethodGet, serverPath(id, ""), nil, &r)
	return r, err
}

// NodeServers reads every server of this node (the control plane knows
// the node from the client's certificate: node is not sent).
func (c *RecordsClient) NodeServers(ctx context.Context, _ string) ([]gameserver.Record, error) {
	var rs []gameserver.Record
	err := c.call(ctx, http.MethodGet, PathRecords, nil, &rs)
	return rs, err
}

func (c *RecordsClient) SetStatus(ctx context.Context, id, status string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "status"), valueBody{Value: status}, nil)
}

func (c *RecordsClient) SetDesired(ctx context.Context, id, desired string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "desired"), valueBody{Value: desired}, nil)
}

func (c *RecordsClient) Installed(ctx context.Context, id string, res catalog.Result) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "installed"), res, nil)
}

func (c *RecordsClient) InstallFailed(ctx context.Context, id, reason string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "install-failed"), valueBody{Value: reason}, nil)
}

func (c *RecordsClient) Reinstalling(ctx context.Context, id, software, version string, env map[string]string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "reinstalling"), reinstallBody{Software: software, Version: version, Env: env}, nil)
}

func (c *RecordsClient) SetRuntimeRef(ctx context.Context, id, ref string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "runtime-ref"), valueBody{Value: ref}, nil)
}

func (c *RecordsClient) ClearRuntimeRef(ctx context.Context, id, ref string) error {
	return c.call(ctx, http.MethodPost, serverPath(id, "runtime-ref/clear"), valueBody{Value: ref}, nil)
}

type valueBody struct {
	Value string `json:"value"`
}

type reinstallBody struct {
	Software string            `json:"software"`
	Version  string            `json:"version"`
	Env      map[string]string `json:"env"`
	// StartAfter is read by HostHandler's reinstall only.
	StartAfter bool `json:"start_after,omitempty"`
}

// RecordsHandler serves the records to agents on the node endpoint. node
// names the node whose certificate made the request (the endpoint checked
// it); recordsOf gives the records of that node's servers only: a server
// of another node is not found, as if it did not exist.
func RecordsHandler(node func(*http.Request) string, recordsOf func(node string) gameserver.Records) http.Handler {
	mux := http.NewServeMux()
	rec := func(r *http.Request) (gameserver.Records, string) { n := node(r); return recordsOf(n), n }
	mux.HandleFunc("GET "+PathRecords, func(w http.ResponseWriter, r *http.Request) {
		rs, n := rec(r)
		all, err := rs.NodeServers(r.Context(), n)
		if err != nil {
			writeError(w, err)
			return
		}
		if all == nil {
			all = []gameserver.Record{}
		}
		writeJSON(w, http.StatusOK, all)
	})
	mux.HandleFunc("GET "+PathRecords+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		rs, _ := rec(r)
		sv, err := rs.Server(r.Context(), r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sv)
	})
	value := func(what string, set func(ctx context.Context, rs gameserver.Records, id, v string) error) {
		mux.HandleFunc("POST "+PathRecords+"/{id}/"+what, func(w http.ResponseWriter, r *http.Request) {
			var b valueBody
			if err := readJSON(r, &b); err != nil {
				writeError(w, err)
				return
			}
			rs, _ := rec(r)
			if err := set(r.Context(), rs, r.PathValue("id"), b.Value); err != nil {
				writeError(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	value("status", func(ctx context.Context, rs gameserver.Records, id, v string) error {
		if !knownStatus(v) {
			return fmt.Errorf("%q is not a status a node records", v)
		}
		return rs.SetStatus(ctx, id, v)
	})
	value("desired", func(ctx context.Context, rs gameserver.Records, id, v string) error {
		if v != "running" && v != "stopped" {
			return fmt.Errorf("%q is not a desired state", v)
		}
		return rs.SetDesired(ctx, id, v)
	})
	value("install-failed", func(ctx context.Context, rs gameserver.Records, id, v string) error {
		return rs.InstallFailed(ctx, id, v)
	})
	value("runtime-ref", func(ctx context.Context, rs gameserver.Records, id, v string) error {
		return rs.SetRuntimeRef(ctx, id, v)
	})
	value("runtime-ref/clear", func(ctx context.Context, rs gameserver.Records, id, v string) error {
		return rs.ClearRuntimeRef(ctx, id, v)
	})
	mux.HandleFunc("POST "+PathRecords+"/{id}/installed", func(w http.ResponseWriter, r *http.Request) {
		var res catalog.Result
		if err := readJSON(r, &res); err != nil {
			writeError(w, err)
			return
		}
		rs, _ := rec(r)
		if err := rs.Installed(r.Context(), r.PathValue("id"), res); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+PathRecords+"/{id}/reinstalling", func(w http.ResponseWriter, r *http.Request) {
		var b reinstallBody
		if err := readJSON(r, &b); err != nil {
			writeError(w, err)
			return
		}
		rs, _ := rec(r)
		if err := rs.Reinstalling(r.Context(), r.PathValue("id"), b.Software, b.Version, b.Env); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// knownStatus: what a node's lifecycle records (never unknown, which the
// control plane reads for a silent node).
func knownStatus(s string) bool {
	switch s {
	case gameserver.StatusInstalling, gameserver.StatusOffline, gameserver.StatusStarting,
		gameserver.StatusRunning, gameserver.StatusStopping, gameserver.StatusCrashed:
		return true
	}
	return false
}
