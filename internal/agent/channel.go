package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
)

// holdChannel keeps the node's channel with the control plane until ctx
// (Run's) ends: it dials, serves the control plane's calls on the
// connection with cfg.Handler, and dials again with backoff when the
// connection ends. It starts at the first welcome and does not follow
// the session: a session ending (a database that stopped acknowledging
// beats) leaves the channel's calls (a console, a download) running;
// both end when Run does.
func (a *agent) holdChannel(ctx context.Context, interval time.Duration) {
	b := newBackoff(a.cfg.MinBackoff, a.cfg.MaxBackoff)
	keepalive := cluster.ChannelKeepalive(interval)
	errLog := slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)
	for {
		c, err := a.dialChannel(ctx)
		if err == nil {
			b.reset()
			a.log.Info("channel with the control plane open", "server", a.cfg.ServerURL)
			cluster.ServeChannel(ctx, c, a.cfg.Handler, keepalive, errLog)
			err = errors.New("the connection ended")
		}
		if ctx.Err() != nil {
			return
		}
		d := b.next()
		a.log.Warn("channel with the control plane ended; reconnecting", "err", err, "in", d.Round(time.Millisecond))
		if !sleep(ctx, d) {
			return
		}
	}
}

// dialChannel dials the control plane with the channel's ALPN protocol,
// its certificate checked against the pinned CA alone
// (cluster.NodeChannelTLS): the agent serves nobody else.
func (a *agent) dialChannel(ctx context.Context) (net.Conn, error) {
	u, err := url.Parse(a.cfg.ServerURL)
	if err != nil {
		return nil, fmt.Errorf("the control plane's URL: %w", err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	id, _ := a.current()
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second},
		Config:    cluster.NodeChannelTLS(id.ca, id.cert),
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != cluster.ChannelProto {
		_ = c.Close()
		return nil, fmt.Errorf("the control plane does not serve the channel (it chose ALPN protocol %q)", p)
	}
	return c, nil
}

// pingHandler is the channel's handler when Config has none: GET
// /v1/ping answers the node's name and version, the rest 404.
func pingHandler(node, version string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+cluster.PathPing, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, cluster.PingResponse{Node: node, Version: version})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, cluster.ErrorBody{Error: "no such call on this agent", Code: cluster.CodeNotFound})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
