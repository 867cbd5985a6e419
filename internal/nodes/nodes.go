package nodes

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/store"
)

// JoinTokenLifetime is how long a join token may be used.
const JoinTokenLifetime = time.Hour

// DefaultUnreachableAfter is the silence after which a node is
// unreachable.
const DefaultUnreachableAfter = 30 * time.Second

// Kind says whether a node runs inside kiln serve or is an agent.
type Kind string

const (
	KindLocal Kind = "local"
	KindAgent Kind = "agent"
)

// Status is a node's state as listed.
type Status string

const (
	// StatusPending: added, not enrolled yet (its join token unused).
	StatusPending Status = "pending"
	// StatusReady: reporting, takes new servers.
	StatusReady Status = "ready"
	// StatusDraining: reporting, takes no new servers.
	StatusDraining Status = "draining"
	// StatusUnreachable: silent for longer than the control plane allows.
	StatusUnreachable Status = "unreachable"
)

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("node not found")
	// ErrNotMember: a certificate that is not its node's current one (the
	// node was removed, or enrolled again), or no certificate at all.
	ErrNotMember = errors.New("not a member of this cluster")
)

// ExistsError: node add named a node that has joined already, or a
// local node.
type ExistsError struct {
	Name string
	Kind Kind
}

func (e *ExistsError) Error() string {
	if e.Kind == KindLocal {
		return fmt.Sprintf("node %q is the local node of a kiln serve; choose another name", e.Name)
	}
	return fmt.Sprintf("node %q has joined already; remove it first to join it again", e.Name)
}

// HasServersError: remove refused, the node has servers.
type HasServersError struct {
	Name    string
	Servers int
}

func (e *HasServersError) Error() string {
	return fmt.Sprintf("node %q has %d server(s): delete them (or, later, move them) before removing it", e.Name, e.Servers)
}

// LocalRunningError: remove refused, the node is the local node of a
// kiln serve that runs (it would list it again at its next beat).
type LocalRunningError struct{ Name string }

func (e *LocalRunningError) Error() string {
	return fmt.Sprintf("node %q is the local node of a kiln serve that runs; stop that kiln serve first", e.Name)
}

// NameTakenError: a kiln serve's --node-name is an agent's name.
type NameTakenError struct{ Name string }

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("node name %q is an agent's: give this kiln serve another --node-name", e.Name)
}

// TokenError: an enrollment refused for its join token. Reason is a
// sentence for the agent's operator.
type TokenError struct{ Reason string }

func (e *TokenError) Error() string { return e.Reason }

// Service keeps the nodes table. It is used by kiln serve (enrollment,
// reports, the local node) and by kiln admin (add, list, drain, remove).
type Service struct {
	db  *store.DB
	now func() time.Time
}

// New returns the service on db; now nil is time.Now.
func New(db *store.DB, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{db: db, now: now}
}

// Add makes node name a pending agent and returns its join token (valid
// JoinTokenLifetime, usable once), carrying the CA's fingerprint. Adding
// a pending node again replaces its token (the older one stops working).
// Errors: *ExistsError (joined already, or a local node), an invalid name.
func (s *Service) Add(ctx context.Context, name string, ca *x509.Certificate) (cluster.JoinToken, int64, error) {
	if err := cluster.ValidName(name); err != nil {
		return cluster.JoinToken{}, 0, err
	}
	tok := cluster.NewJoinToken(cluster.Fingerprint(ca), name)
	now := s.now().UnixMilli()
	expires := now + JoinTokenLifetime.Milliseconds()
	res, err := s.db.Write().ExecContext(ctx, `INSERT INTO nodes (name, kind, join_digest, join_expires_at, created_at) VALUES ($1, 'agent', $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET join_digest = excluded.join_digest, join_expires_at = excluded.join_expires_at, join_key = NULL
WHERE nodes.kind = 'agent' AND nodes.cert_serial IS NULL`, name, tok.Digest(), expires, now)
	if err != nil {
		return cluster.JoinToken{}, 0, fmt.Errorf("add node %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return cluster.JoinToken{}, 0, fmt.Errorf("add node %q: %w", name, err)
	} else if n == 0 {
		var kind Kind
		if err := s.db.Read().QueryRowContext(ctx, `SELECT kind FROM nodes WHERE name = $1`, name).Scan(&kind); err != nil {
			return cluster.JoinToken{}, 0, fmt.Errorf("add node %q: %w", name, err)
		}
		return cluster.JoinToken{}, 0, &ExistsError{Name: name, Kind: kind}
	}
	return tok, expires, nil
}

// Enroll exchanges a join token and a certificate request (PEM) for the
// node's certificate (PEM), signed by ca. The token must be of this CA,
// known, unexpired and unused; "unused" admits the key that used it
// already, so an agent killed before it stored its certificate gets it
// again at its next start, and any other key is refused. The certificate
// becomes the node's current one (an earlier one is refused from then).
// Errors: *TokenError, cluster.ErrCSR (wrapped).
func (s *Service) Enroll(ctx context.Context, ca *cluster.CA, token, csrPEM string) (name string, certPEM []byte, err error) {
	tok, err := cluster.ParseJoinToken(token)
	if err != nil {
		return "", nil, &TokenError{Reason: "that is not a Kiln join token"}
	}
	if tok.CAFingerprint != ca.Fingerprint() {
		return "", nil, &TokenError{Reason: "the join token is for another cluster (its CA fingerprint is not this control plane's)"}
	}
	b, _ := pem.Decode([]byte(csrPEM))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return "", nil, fmt.Errorf("%w: want a PEM CERTIFICATE REQUEST", cluster.ErrCSR)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", cluster.ErrCSR, err)
	}
	sum := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	key := hex.EncodeToString(sum[:])

	var digest, usedBy sql.NullString
	var expires sql.NullInt64
	var kind Kind
	err = s.db.Read().QueryRowContext(ctx, `SELECT kind, join_digest, join_expires_at, join_key FROM nodes WHERE name = $1`, tok.Node).
		Scan(&kind, &digest, &expires, &usedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, &TokenError{Reason: "unknown or wrong join token"}
	}
	if err != nil {
		return "", nil, fmt.Errorf("enroll: %w", err)
	}
	if kind != KindAgent || !digest.Valid || subtle.ConstantTimeCompare([]byte(digest.String), []byte(tok.Digest())) != 1 {
		return "", nil, &TokenError{Reason: "unknown or wrong join token"}
	}
	now := s.now()
	if !expires.Valid || now.UnixMilli() >= expires.Int64 {
		return "", nil, &TokenError{Reason: fmt.Sprintf("the join token expired at %s; make a new one with kiln admin node add %s",
			time.UnixMilli(expires.Int64).UTC().Format(time.RFC3339), tok.Node)}
	}
	if usedBy.Valid && usedBy.String != key {
		return "", nil, &TokenError{Reason: "the join token was used already"}
	}
	der, serial, err := ca.SignNode(b.Bytes, tok.Node, now)
	if err != nil {
		return "", nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	res, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET join_key = $1, cert_serial = $2, cert_expires_at = $3, enrolled_at = $4
WHERE name = $5 AND kind = 'agent' AND join_digest = $6 AND join_expires_at > $4 AND (join_key IS NULL OR join_key = $1)`,
		key, serial, cert.NotAfter.UnixMilli(), now.UnixMilli(), tok.Node, digest.String)
	if err != nil {
		return "", nil, fmt.Errorf("enroll: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return "", nil, fmt.Errorf("enroll: %w", err)
	} else if n == 0 {
		// Another enrollment with another key won the race.
		return "", nil, &TokenError{Reason: "the join token was used already"}
	}
	return tok.Node, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Authorize says whether serial is one of node name's certificates: its
// current one, or the one a renewal signed (Renew) that the node may
// hold now. A call with the renewed certificate makes it the current
// one, and the older is refused from then: the node is seen with the
// new one, so it holds it. Errors: ErrNotMember.
func (s *Service) Authorize(ctx context.Context, name, serial string) error {
	if _, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET cert_serial = cert_next_serial, cert_expires_at = cert_next_expires_at,
cert_next_serial = NULL, cert_next_expires_at = NULL WHERE name = $1 AND kind = 'agent' AND cert_next_serial = $2`, name, serial); err != nil {
		return fmt.Errorf("authorize node %q: %w", name, err)
	}
	var cur sql.NullString
	err := s.db.Read().QueryRowContext(ctx, `SELECT cert_serial FROM nodes WHERE name = $1 AND kind = 'agent'`, name).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (!cur.Valid || cur.String != serial)) {
		return ErrNotMember
	}
	if err != nil {
		return fmt.Errorf("authorize node %q: %w", name, err)
	}
	return nil
}

// Renew signs a node's certificate request for a new key (PEM) with ca,
// asked over a connection made with the node's current certificate
// (presented), and records the new certificate as pending: both are
// accepted until the node is seen with the new one (Authorize). A
// renewal whose answer was lost is replaced by the next; the current
// certificate is accepted throughout. Errors: ErrNotMember (presented is
// not the node's current certificate), cluster.ErrCSR (wrapped; also a
// request for the presented certificate's own key).
func (s *Service) Renew(ctx context.Context, ca *cluster.CA, presented *x509.Certificate, csrPEM string) (certPEM []byte, err error) {
	name, serial := cluster.NodeOf(presented)
	b, _ := pem.Decode([]byte(csrPEM))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: want a PEM CERTIFICATE REQUEST", cluster.ErrCSR)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", cluster.ErrCSR, err)
	}
	if eq, ok := presented.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); ok && eq.Equal(csr.PublicKey) {
		return nil, fmt.Errorf("%w: the request is for the key of the certificate in use; a renewal needs a new key", cluster.ErrCSR)
	}
	der, next, err := ca.SignNode(b.Bytes, name, s.now())
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	res, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET cert_next_serial = $1, cert_next_expires_at = $2 WHERE name = $3 AND kind = 'agent' AND cert_serial = $4`,
		next, cert.NotAfter.UnixMilli(), name, serial)
	if err := affected(res, err, "renew the certificate of node "+name); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Members maps every enrolled agent to the serials of the certificates
// it is accepted with: its current one, then a renewed one it may hold
// (Renew).
func (s *Service) Members(ctx context.Context) (map[string][]string, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT name, cert_serial, cert_next_serial FROM nodes WHERE kind = 'agent' AND cert_serial IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var name, serial string
		var next sql.NullString
		if err := rows.Scan(&name, &serial, &next); err != nil {
			return nil, fmt.Errorf("list members: %w", err)
		}
		out[name] = []string{serial}
		if next.Valid {
			out[name] = append(out[name], next.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	return out, nil
}

// Hello records what an agent says of itself as its session opens, and
// the address its connection came from. Errors: ErrNotMember (the
// certificate stopped being current).
func (s *Service) Hello(ctx context.Context, name, serial, addr string, h cluster.Hello) error {
	res, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET address = $1, public_host = $2, sftp_addr = $3, port_first = $4, port_last = $5,
runtime = $6, version = $7 WHERE name = $8 AND kind = 'agent' AND cert_serial = $9`,
		addr, h.PublicHost, h.SFTPAddr, h.PortFirst, h.PortLast, h.Runtime, h.Version, name, serial)
	return affected(res, err, "record node "+name)
}

// Beat records an agent's heartbeat: reachable until now + within.
// Errors: ErrNotMember.
func (s *Service) Beat(ctx context.Context, name, serial string, hb cluster.Heartbeat, within time.Duration) error {
	busy, _ := json.Marshal(nonNil(hb.PortsBusy))
	now := s.now().UnixMilli()
	res, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET memory_total = $1, memory_free = $2, disk_total = $3, disk_free = $4, ports_busy = $5,
heartbeat_at = $6, reachable_until = $7 WHERE name = $8 AND kind = 'agent' AND cert_serial = $9`,
		hb.MemoryTotal, hb.MemoryFree, hb.DiskTotal, hb.DiskFree, string(busy), now, now+within.Milliseconds(), name, serial)
	return affected(res, err, "record the heartbeat of node "+name)
}

// RegisterLocal lists the local node of this kiln serve (kind local),
// or updates its row. Errors: *NameTakenError (an agent has the name).
func (s *Service) RegisterLocal(ctx context.Context, name string, h cluster.Hello) error {
	res, err := s.db.Write().ExecContext(ctx, `INSERT INTO nodes (name, kind, public_host, sftp_addr, port_first, port_last, runtime, version, created_at)
VALUES ($1, 'local', $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET public_host = excluded.public_host, sftp_addr = excluded.sftp_addr, port_first = excluded.port_first,
port_last = excluded.port_last, runtime = excluded.runtime, version = excluded.version WHERE nodes.kind = 'local'`,
		name, h.PublicHost, h.SFTPAddr, h.PortFirst, h.PortLast, h.Runtime, h.Version, s.now().UnixMilli())
	if err := affected(res, err, "register the local node "+name); errors.Is(err, ErrNotMember) {
		return &NameTakenError{Name: name}
	} else if err != nil {
		return err
	}
	return nil
}

// BeatLocal records the local node's report, as Beat an agent's.
func (s *Service) BeatLocal(ctx context.Context, name string, hb cluster.Heartbeat, within time.Duration) error {
	busy, _ := json.Marshal(nonNil(hb.PortsBusy))
	now := s.now().UnixMilli()
	res, err := s.db.Write().ExecContext(ctx, `UPDATE nodes SET memory_total = $1, memory_free = $2, disk_total = $3, disk_free = $4, ports_busy = $5,
heartbeat_at = $6, reachable_until = $7 WHERE name = $8 AND kind = 'local'`,
		hb.MemoryTotal, hb.MemoryFree, hb.DiskTotal, hb.DiskFree, string(busy), now, now+within.Milliseconds(), name)
	return affected(res, err, "record the local node's report")
}

// SetDraining drains a node (no new servers are placed on it) or undrains
// it. Errors: ErrNotFound.
func (s *Service) SetDraining(ctx context.Context, name string, draining bool) error {
	var res sql.Result
	var err error
	if draining {
		res, err = s.db.Write().ExecContext(ctx, `UPDATE nodes SET drained_at = COALESCE(drained_at, $1) WHERE name = $2`, s.now().UnixMilli(), name)
	} else {
		res, err = s.db.Write().ExecContext(ctx, `UPDATE nodes SET drained_at = NULL WHERE name = $1`, name)
	}
	if err := affected(res, err, "drain node "+name); errors.Is(err, ErrNotMember) {
		return ErrNotFound
	} else if err != nil {
		return err
	}
	return nil
}

// Remove deletes a node, which revokes its certificate: every call made
// with it is refused from then, and the control plane holding its
// connection cuts it (Endpoint). Refused while servers are on the node,
// and for the local node of a kiln serve that runs. Errors: ErrNotFound,
// *HasServersError, *LocalRunningError.
func (s *Service) Remove(ctx context.Context, name string) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		var kind Kind
		var until sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT kind, reachable_until FROM nodes WHERE name = $1`, name).Scan(&kind, &until)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("remove node %q: %w", name, err)
		}
		if kind == KindLocal && until.Valid && until.Int64 > s.now().UnixMilli() {
			return &LocalRunningError{Name: name}
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM servers WHERE node = $1`, name).Scan(&n); err != nil {
			return fmt.Errorf("remove node %q: %w", name, err)
		}
		if n > 0 {
			return &HasServersError{Name: name, Servers: n}
		}
		// The count and the delete are one statement's guard too: a server
		// placed meanwhile by another replica keeps the node.
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM servers WHERE node = $1)`, name)
		if err := affected(res, err, "remove node "+name); errors.Is(err, ErrNotMember) {
			return &HasServersError{Name: name, Servers: 1}
		} else if err != nil {
			return err
		}
		return nil
	})
}

// affected turns an update of no row into ErrNotMember.
func affected(res sql.Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return ErrNotMember
	}
	return nil
}

func nonNil(p []int) []int {
	if p == nil {
		return []int{}
	}
	return p
}
