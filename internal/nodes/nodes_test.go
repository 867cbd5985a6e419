package nodes

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// clock is a test clock: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at the real time (certificates made on it must be
// valid for real TLS handshakes), to the second (as certificates keep times).
func newClock() *clock { return &clock{t: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func box(t *testing.T, b byte) *secretbox.Box {
	t.Helper()
	bx, err := secretbox.New([]byte(strings.Repeat(string(b), secretbox.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return bx
}

// fixture is a database with a CA and a service on a test clock.
type fixture struct {
	db  *store.DB
	ca  *cluster.CA
	svc *Service
	clk *clock
}

func newFixture(t *testing.T, db *store.DB) *fixture {
	t.Helper()
	clk := newClock()
	ca, err := LoadCA(t.Context(), db, box(t, 'k'), clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{db: db, ca: ca, svc: New(db, clk.Now), clk: clk}
}

// request is a certificate request of a fresh key.
func request(t *testing.T) (crypto.Signer, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		t.Fatal(err)
	}
	return k, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// enroll adds name and enrolls it; it returns its certificate's serial.
func (f *fixture) enroll(t *testing.T, name string) string {
	t.Helper()
	tok, _, err := f.svc.Add(t.Context(), name, f.ca.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	_, csr := request(t)
	_, certPEM, err := f.svc.Enroll(t.Context(), f.ca, tok.String(), csr)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cluster.ParseCertificatePEM(certPEM)
	_, serial := cluster.NodeOf(c)
	return serial
}

func TestLoadCA(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		first, err := LoadCA(ctx, db, box(t, 'k'), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		again, err := LoadCA(ctx, db, box(t, 'k'), time.Now())
		if err != nil || again.Fingerprint() != first.Fingerprint() {
			t.Fatalf("LoadCA again = %v, %v; want the same CA", again, err)
		}
		if c, err := CACertificate(ctx, db); err != nil || cluster.Fingerprint(c) != first.Fingerprint() {
			t.Errorf("CACertificate = %v, %v", c, err)
		}
		var sealed string
		if err := db.Read().QueryRowContext(ctx, `SELECT key_sealed FROM cluster_ca`).Scan(&sealed); err != nil || !strings.HasPrefix(sealed, "v1:") {
			t.Errorf("key_sealed = %.10q, %v; want a sealed value", sealed, err)
		}
		if _, err := LoadCA(ctx, db, box(t, 'x'), time.Now()); err == nil || !strings.Contains(err.Error(), "--secret-key") {
			t.Errorf("LoadCA with another key = %v, want an error naming --secret-key", err)
		}
		// A replica with another key that does not serve the endpoint
		// needs only the certificate: it runs on.
		if c, err := EnsureCA(ctx, db, box(t, 'x'), time.Now()); err != nil || cluster.Fingerprint(c) != first.Fingerprint() {
			t.Errorf("EnsureCA with another key = %v, %v; want the CA's certificate", c, err)
		}
		if _, err := CACertificate(ctx, storetest.SQLite(t)); !errors.Is(err, ErrNoCA) {
			t.Errorf("CACertificate of a database without CA = %v, want ErrNoCA", err)
		}
	})
}

func TestEnroll(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		ctx := t.Context()
		tok, expires, err := f.svc.Add(ctx, "edge-1", f.ca.Certificate())
		if err != nil {
			t.Fatal(err)
		}
		if tok.CAFingerprint != f.ca.Fingerprint() || tok.Node != "edge-1" || expires != f.clk.Now().Add(time.Hour).UnixMilli() {
			t.Fatalf("Add = %+v, expires %d", tok.LogValue(), expires)
		}
		var digest string
		if err := db.Read().QueryRowContext(ctx, `SELECT join_digest FROM nodes WHERE name = 'edge-1'`).Scan(&digest); err != nil || digest != tok.Digest() {
			t.Errorf("stored %q, %v; want the digest only", digest, err)
		}
		keyA, csrA := request(t)
		_, csrB := request(t)
		refused := func(what, token, csr, want string) {
			t.Helper()
			_, _, err := f.svc.Enroll(ctx, f.ca, token, csr)
			if te, ok := errors.AsType[*TokenError](err); !ok || !strings.Contains(te.Reason, want) {
				t.Errorf("%s: Enroll = %v, want *TokenError %q", what, err, want)
			}
		}
		wrong := tok
		wrong.Secret = cluster.NewJoinToken(tok.CAFingerprint, "x").Secret
		other := tok
		other.CAFingerprint = strings.Repeat("0", 64)
		unknown := cluster.NewJoinToken(tok.CAFingerprint, "nobody")
		refused("malformed", "KILN1nope", csrA, "not a Kiln join token")
		refused("wrong secret", wrong.String(), csrA, "unknown or wrong join token")
		refused("unknown node", unknown.String(), csrA, "unknown or wrong join token")
		refused("another cluster", other.String(), csrA, "another cluster")
		if _, _, err := f.svc.Enroll(ctx, f.ca, tok.String(), "not PEM"); !errors.Is(err, cluster.ErrCSR) {
			t.Errorf("Enroll(bad CSR) = %v, want ErrCSR", err)
		}

		name, certPEM, err := f.svc.Enroll(ctx, f.ca, tok.String(), csrA)
		if err != nil || name != "edge-1" {
			t.Fatalf("Enroll = %q, %v", name, err)
		}
		cert, _ := cluster.ParseCertificatePEM(certPEM)
		_, serialA := cluster.NodeOf(cert)
		if !keyA.Public().(*ecdsa.PublicKey).Equal(cert.PublicKey) || cert.Subject.CommonName != "edge-1" {
			t.Errorf("certificate of %q, key equal %v", cert.Subject.CommonName, keyA.Public().(*ecdsa.PublicKey).Equal(cert.PublicKey))
		}
		if err := f.svc.Authorize(ctx, "edge-1", serialA); err != nil {
			t.Errorf("Authorize = %v", err)
		}
		// Used: by another key refused, by the same key the certificate
		// again (an agent killed before it stored it), the older refused.
		refused("reused by another key", tok.String(), csrB, "used already")
		_, again, err := f.svc.Enroll(ctx, f.ca, tok.String(), csrA)
		if err != nil {
			t.Fatalf("Enroll again with the same key = %v", err)
		}
		c2, _ := cluster.ParseCertificatePEM(again)
		_, serialA2 := cluster.NodeOf(c2)
		if serialA2 == serialA {
			t.Error("the same serial twice")
		}
		if err := f.svc.Authorize(ctx, "edge-1", serialA); !errors.Is(err, ErrNotMember) {
			t.Errorf("Authorize(the older certificate) = %v, want ErrNotMember", err)
		}
		if err := f.svc.Authorize(ctx, "edge-1", serialA2); err != nil {
			t.Errorf("Authorize(the newer) = %v", err)
		}
		if _, _, err := f.svc.Add(ctx, "edge-1", f.ca.Certificate()); err == nil || err.Error() != `node "edge-1" has joined already; remove it first to join it again` {
			t.Errorf("Add(joined) = %v", err)
		}

		// A token expires after an hour: usable one millisecond before.
		tok2, _, _ := f.svc.Add(ctx, "edge-2", f.ca.Certificate())
		tok3, _, _ := f.svc.Add(ctx, "edge-3", f.ca.Certificate())
		expiry := f.clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		f.clk.Add(time.Hour - time.Millisecond)
		if _, _, err := f.svc.Enroll(ctx, f.ca, tok3.String(), csrB); err != nil {
			t.Errorf("Enroll 1 ms before expiry = %v", err)
		}
		f.clk.Add(time.Millisecond)
		refused("expired", tok2.String(), csrB, "the join token expired at "+expiry+"; make a new one with kiln admin node add edge-2")

		// Adding a pending node again replaces its token.
		old, _, _ := f.svc.Add(ctx, "edge-2", f.ca.Certificate())
		fresh, _, _ := f.svc.Add(ctx, "edge-2", f.ca.Certificate())
		refused("replaced", old.String(), csrB, "unknown or wrong join token")
		if _, _, err := f.svc.Enroll(ctx, f.ca, fresh.String(), csrB); err != nil {
			t.Errorf("Enroll(the newer token) = %v", err)
		}
		if _, _, err := f.svc.Add(ctx, "bad name", f.ca.Certificate()); err == nil {
			t.Error("Add accepted a bad name")
		}
	})
}

func TestList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		ctx := t.Context()
		within := 30 * time.Second
		if err := f.svc.RegisterLocal(ctx, "local", cluster.Hello{Version: "v1", PublicHost: "10.0.0.1", SFTPAddr: "10.0.0.1:2022",
			PortFirst: 25565, PortLast: 25664, Runtime: "process"}); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.BeatLocal(ctx, "local", cluster.Heartbeat{MemoryTotal: 8 << 30, MemoryFree: 6 << 30, DiskTotal: 100 << 30,
			DiskFree: 40 << 30, PortsBusy: []int{25566, 25570}}, within); err != nil {
			t.Fatal(err)
		}
		serial := f.enroll(t, "edge-1")
		if err := f.svc.Hello(ctx, "edge-1", serial, "192.0.2.7:40000", cluster.Hello{Version: "v2", PublicHost: "edge1.example",
			SFTPAddr: ":2022", PortFirst: 30000, PortLast: 30009, Runtime: "docker"}); err != nil {
			t.Fatal(err)
		}
		beatAt := f.clk.Now().UnixMilli()
		if err := f.svc.Beat(ctx, "edge-1", serial, cluster.Heartbeat{MemoryTotal: 4 << 30, MemoryFree: 1 << 30, DiskTotal: 50 << 30,
			DiskFree: 10 << 30, PortsBusy: []int{30001}}, within); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.svc.Add(ctx, "edge-2", f.ca.Certificate()); err != nil {
			t.Fatal(err)
		}
		// Two servers on the local node (one on a busy port), none on the agents.
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'a', 1)`); err != nil {
			t.Fatal(err)
		}
		for i, port := range []int{25565, 25566} {
			if _, err := db.Write().ExecContext(ctx, `INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
VALUES ($1, 'team_a', $2, 'paper', '1.21.4', 'offline', 'local', $3, 1024, 10, 100, 1, 1)`, fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", i), fmt.Sprint("s", i), port); err != nil {
				t.Fatal(err)
			}
		}
		list, err := f.svc.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		now := f.clk.Now().UnixMilli()
		i64 := func(v int64) *int64 { return &v }
		want := []Node{
			{Name: "edge-1", Kind: KindAgent, Status: StatusReady, Address: "192.0.2.7:40000", PublicHost: "edge1.example", SFTPAddr: ":2022",
				PortFirst: 30000, PortLast: 30009, Runtime: "docker", Version: "v2", MemoryTotal: 4 << 30, MemoryFree: 1 << 30, DiskTotal: 50 << 30,
				DiskFree: 10 << 30, PortsFree: 9, LastHeartbeatAt: i64(beatAt), CertExpiresAt: i64(f.clk.Now().Add(cluster.NodeCertLifetime).UnixMilli()),
				EnrolledAt: i64(now), CreatedAt: now},
			{Name: "edge-2", Kind: KindAgent, Status: StatusPending, JoinExpiresAt: i64(now + time.Hour.Milliseconds()), CreatedAt: now},
			{Name: "local", Kind: KindLocal, Status: StatusReady, PublicHost: "10.0.0.1", SFTPAddr: "10.0.0.1:2022", PortFirst: 25565, PortLast: 25664,
				Runtime: "process", Version: "v1", MemoryTotal: 8 << 30, MemoryFree: 6 << 30, DiskTotal: 100 << 30, DiskFree: 40 << 30,
				MemoryAllocatedMB: 2048, Servers: 2, PortsFree: 97, LastHeartbeatAt: i64(now), CreatedAt: now},
		}
		if !reflect.DeepEqual(list, want) {
			t.Errorf("List =\n%s\nwant\n%s", show(list), show(want))
		}

		// Draining, then silence: unreachable wins over draining.
		if err := f.svc.SetDraining(ctx, "edge-1", true); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.SetDraining(ctx, "nope", true); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetDraining(unknown) = %v, want ErrNotFound", err)
		}
		statuses := func() map[string]Status {
			list, err := f.svc.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]Status{}
			for _, n := range list {
				m[n.Name] = n.Status
			}
			return m
		}
		f.clk.Add(within - time.Millisecond)
		if got := statuses(); !reflect.DeepEqual(got, map[string]Status{"edge-1": StatusDraining, "edge-2": StatusPending, "local": StatusReady}) {
			t.Errorf("statuses just before the silence limit: %v", got)
		}
		f.clk.Add(time.Millisecond)
		if got := statuses(); !reflect.DeepEqual(got, map[string]Status{"edge-1": StatusUnreachable, "edge-2": StatusPending, "local": StatusUnreachable}) {
			t.Errorf("statuses at the silence limit: %v", got)
		}
		if err := f.svc.Beat(ctx, "edge-1", serial, cluster.Heartbeat{}, within); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.SetDraining(ctx, "edge-1", false); err != nil {
			t.Fatal(err)
		}
		if got := statuses()["edge-1"]; got != StatusReady {
			t.Errorf("after a beat and undrain: %s, want ready", got)
		}
		if err := f.svc.RegisterLocal(ctx, "edge-1", cluster.Hello{}); err == nil || err.Error() != `node name "edge-1" is an agent's: give this kiln serve another --node-name` {
			t.Errorf("RegisterLocal(an agent's name) = %v", err)
		}
		if _, _, err := f.svc.Add(ctx, "local", f.ca.Certificate()); err == nil || !strings.Contains(err.Error(), "local node") {
			t.Errorf("Add(the local node's name) = %v", err)
		}
	})
}

func show(list []Node) string {
	var b strings.Builder
	for _, n := range list {
		fmt.Fprintf(&b, "  %+v beat=%v join=%v cert=%v enrolled=%v\n", n, deref(n.LastHeartbeatAt), deref(n.JoinExpiresAt), deref(n.CertExpiresAt), deref(n.EnrolledAt))
	}
	return b.String()
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestRemove(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		ctx := t.Context()
		within := 30 * time.Second
		if err := f.svc.RegisterLocal(ctx, "local", cluster.Hello{}); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.BeatLocal(ctx, "local", cluster.Heartbeat{}, within); err != nil {
			t.Fatal(err)
		}
		serial := f.enroll(t, "edge-1")
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'a', 1)`); err != nil {
			t.Fatal(err)
		}
		for i, node := range []string{"local", "edge-1"} {
			if _, err := db.Write().ExecContext(ctx, `INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
VALUES ($1, 'team_a', $2, 'paper', '1.21.4', 'offline', $3, 25565, 1024, 10, 100, 1, 1)`, fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", i), node, node); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.svc.Remove(ctx, "local"); err == nil || err.Error() != `node "local" is the local node of a kiln serve that runs; stop that kiln serve first` {
			t.Errorf("Remove(a running local node) = %v", err)
		}
		if err := f.svc.Remove(ctx, "edge-1"); err == nil || err.Error() != `node "edge-1" has 1 server(s): delete them (or, later, move them) before removing it` {
			t.Errorf("Remove(a node with a server) = %v", err)
		}
		if err := f.svc.Authorize(ctx, "edge-1", serial); err != nil {
			t.Fatalf("a refused remove changed the node: %v", err)
		}
		if _, err := db.Write().ExecContext(ctx, `DELETE FROM servers`); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Remove(ctx, "edge-1"); err != nil {
			t.Fatalf("Remove = %v", err)
		}
		if err := f.svc.Authorize(ctx, "edge-1", serial); !errors.Is(err, ErrNotMember) {
			t.Errorf("Authorize(removed) = %v, want ErrNotMember", err)
		}
		if err := f.svc.Beat(ctx, "edge-1", serial, cluster.Heartbeat{}, within); !errors.Is(err, ErrNotMember) {
			t.Errorf("Beat(removed) = %v, want ErrNotMember", err)
		}
		if m, err := f.svc.Members(ctx); err != nil || len(m) != 0 {
			t.Errorf("Members = %v, %v; want none", m, err)
		}
		if err := f.svc.Remove(ctx, "edge-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Remove again = %v, want ErrNotFound", err)
		}
		// A local node whose kiln serve is gone may be removed.
		f.clk.Add(within)
		if err := f.svc.Remove(ctx, "local"); err != nil {
			t.Errorf("Remove(a silent local node) = %v", err)
		}
	})
}

// TestRenew: a renewal's certificate is accepted next to the current one
// until the node is seen with it, then alone; a renewal whose answer was
// lost is replaced by the next, the current certificate accepted
// throughout; only the current certificate renews, and only for a new
// key.
func TestRenew(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		ctx := t.Context()
		cur, _ := nodeCert(t, f, "edge-1")
		a, _ := x509.ParseCertificate(cur.Certificate[0])
		serial := func(c *x509.Certificate) string { _, s := cluster.NodeOf(c); return s }
		renew := func(presented *x509.Certificate) (*x509.Certificate, crypto.Signer) {
			t.Helper()
			key, csr := request(t)
			certPEM, err := f.svc.Renew(ctx, f.ca, presented, csr)
			if err != nil {
				t.Fatalf("Renew(%s) = %v", serial(presented), err)
			}
			c, err := cluster.ParseCertificatePEM(certPEM)
			if err != nil || c.Subject.CommonName != "edge-1" || !c.NotAfter.Equal(f.clk.Now().Add(cluster.NodeCertLifetime)) {
				t.Fatalf("Renew's certificate = %v, %v", c, err)
			}
			return c, key
		}
		members := func(want ...*x509.Certificate) {
			t.Helper()
			m, err := f.svc.Members(ctx)
			var ws []string
			for _, c := range want {
				ws = append(ws, serial(c))
			}
			if err != nil || !reflect.DeepEqual(m["edge-1"], ws) {
				t.Errorf("Members = %v, %v; want edge-1: %v", m, err, ws)
			}
		}
		authorize := func(c *x509.Certificate, want error) {
			t.Helper()
			if err := f.svc.Authorize(ctx, "edge-1", serial(c)); !errors.Is(err, want) {
				t.Errorf("Authorize(%s) = %v, want %v", serial(c), err, want)
			}
		}

		b, _ := renew(a)
		members(a, b)
		// The answer was lost: the node asks again with its current one.
		c, keyC := renew(a)
		members(a, c)
		authorize(b, ErrNotMember)
		authorize(a, nil)
		members(a, c)
		// Seen with the new one: it is the only one from now on.
		authorize(c, nil)
		members(c)
		authorize(a, ErrNotMember)
		list, err := f.svc.List(ctx)
		if err != nil || len(list) != 1 || list[0].CertExpiresAt == nil || *list[0].CertExpiresAt != c.NotAfter.UnixMilli() {
			t.Errorf("List = %s, %v; want the certificate expiring at %v", show(list), err, c.NotAfter)
		}

		// Refusals.
		if _, err := f.svc.Renew(ctx, f.ca, a, mustCSR(t, keyC)); !errors.Is(err, ErrNotMember) {
			t.Errorf("Renew with a replaced certificate = %v, want ErrNotMember", err)
		}
		if _, err := f.svc.Renew(ctx, f.ca, c, mustCSR(t, keyC)); !errors.Is(err, cluster.ErrCSR) {
			t.Errorf("Renew for the key in use = %v, want ErrCSR", err)
		}
		if _, err := f.svc.Renew(ctx, f.ca, c, "not a csr"); !errors.Is(err, cluster.ErrCSR) {
			t.Errorf("Renew of garbage = %v, want ErrCSR", err)
		}
		members(c)
	})
}

// mustCSR is a certificate request of key.
func mustCSR(t *testing.T, key crypto.Signer) string {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}
