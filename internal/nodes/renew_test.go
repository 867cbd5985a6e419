package nodes

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestAgentRenews: a real agent whose certificate has less than a third
// of its life left (its clock moved on) renews it over mutual TLS: a new
// key, the control plane's signature, the row's serial the new one once
// the agent connects with it, its session and channel back on it, and
// the older certificate refused.
func TestAgentRenews(t *testing.T) {
	f := newFixture(t, storetest.SQLite(t))
	url, ep := serveEndpoint(t, f, 3*time.Second)
	tok, _, err := f.svc.Add(t.Context(), "edge-1", f.ca.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var ahead atomic.Int64 // how far the agent's clock is ahead
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{ServerURL: url, JoinToken: tok.String(), DataDir: dir, PublicHost: "127.0.0.2",
			Ports: node.PortRange{First: 30000, Last: 30009}, SFTPAddr: "127.0.0.2:2022", Runtime: "process", Version: "test",
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, RenewCheck: 20 * time.Millisecond,
			Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run = %v", err)
		}
	})
	connected(t, ep, "edge-1")
	old, err := tls.LoadX509KeyPair(filepath.Join(dir, agent.CertFile), filepath.Join(dir, agent.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	_, oldSerial := cluster.NodeOf(old.Leaf)

	// settled is the row's serial once it is the one on disk, nothing
	// pending and no renewal file left.
	settled := func() (string, bool, string) {
		var cur string
		var next sql.NullString
		if err := f.db.Read().QueryRowContext(t.Context(), `SELECT cert_serial, cert_next_serial FROM nodes WHERE name = 'edge-1'`).Scan(&cur, &next); err != nil {
			return "", false, err.Error()
		}
		disk, err := tls.LoadX509KeyPair(filepath.Join(dir, agent.CertFile), filepath.Join(dir, agent.KeyFile))
		if err != nil {
			return "", false, err.Error()
		}
		_, onDisk := cluster.NodeOf(disk.Leaf)
		_, errK := os.Stat(filepath.Join(dir, agent.KeyNextFile))
		_, errC := os.Stat(filepath.Join(dir, agent.CertNextFile))
		detail := fmt.Sprintf("row %s (pending %v), disk %s, .next files: %v %v", cur, next.String, onDisk, errK == nil, errC == nil)
		return cur, cur == onDisk && !next.Valid && os.IsNotExist(errK) && os.IsNotExist(errC), detail
	}

	// 100 days before it ends: less than a third of its year is left.
	// Back to the real time once the control plane signed a renewal (the
	// agent checks every 20 ms; each renewal is a year from the real now).
	ahead.Store(int64(time.Until(old.Leaf.NotAfter.Add(-100 * 24 * time.Hour))))
	eventually.True(t, eventually.Within, "a renewal signed", func() (bool, string) {
		var cur string
		var next sql.NullString
		err := f.db.Read().QueryRowContext(t.Context(), `SELECT cert_serial, cert_next_serial FROM nodes WHERE name = 'edge-1'`).Scan(&cur, &next)
		return err == nil && (next.Valid || cur != oldSerial), fmt.Sprintf("row %s (pending %v), %v", cur, next.String, err)
	})
	ahead.Store(0)
	serial := eventually.Value(t, eventually.Within, "the renewed certificate in use", settled)
	if serial == oldSerial {
		t.Fatal("the certificate was not renewed")
	}
	newCert, _ := tls.LoadX509KeyPair(filepath.Join(dir, agent.CertFile), filepath.Join(dir, agent.KeyFile))
	if newCert.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(old.Leaf.PublicKey) {
		t.Error("the renewed certificate is of the old key")
	}

	// The channel is back, on the new certificate; the session reports.
	eventually.True(t, eventually.Within, "the channel on the new certificate", func() (bool, string) {
		ep.mu.Lock()
		ch := ep.chans["edge-1"]
		ep.mu.Unlock()
		if ch == nil || ch.cc.Err() != nil {
			return false, "no channel"
		}
		return ch.serial == serial, "channel on " + ch.serial
	})
	if p := ping(t, ep, "edge-1"); p.Node != "edge-1" {
		t.Errorf("ping = %+v", p)
	}
	// The older certificate is refused.
	code, body := call(t, client(f, &old), url+cluster.PathSession, "")
	if code != http.StatusForbidden || !strings.Contains(body, `"code":"NODE_NOT_MEMBER"`) {
		t.Errorf("a call with the replaced certificate = %d %s, want 403 NODE_NOT_MEMBER", code, body)
	}
	list, err := f.svc.List(t.Context())
	if err != nil || len(list) != 1 || *list[0].CertExpiresAt != newCert.Leaf.NotAfter.UnixMilli() || list[0].Status != StatusReady {
		t.Errorf("List = %s, %v; want edge-1 ready, its certificate expiring at %v", show(list), err, newCert.Leaf.NotAfter)
	}
}
