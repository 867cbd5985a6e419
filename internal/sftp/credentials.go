package sftp

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Sealer seals and opens secrets (*secretbox.Box).
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

// Servers is what SFTP needs of the servers package (*servers.Service).
type Servers interface {
	// Get returns one of the team's servers; servers.ErrNotFound for a
	// server of another team or none.
	Get(ctx context.Context, teamID, id string) (servers.Server, error)
	// Access returns the server's root and, for a write, its disk ledger.
	Access(ctx context.Context, teamID, id string, write bool) (servers.Access, error)
}

// DefaultPort is the SFTP listener's port unless the operator says
// otherwise (the one game panels use).
const DefaultPort = 2022

// ServiceOptions are the public address credentials name.
type ServiceOptions struct {
	PublicHost string // --public-host
	Port       int    // the SFTP listener's public port; 0: DefaultPort
}

// Service issues SFTP credentials per (token, server), checks logins
// against them and ends the sessions they opened when they stop being
// valid (RevokeServer, a rotation, RevokeToken; Server re-checks the
// database for what another process changed).
type Service struct {
	db       *store.DB
	box      Sealer
	servers  Servers
	opts     ServiceOptions
	log      *slog.Logger
	sessions *registry
}

// NewService returns a Service storing in db, sealing passwords with box.
func NewService(db *store.DB, box Sealer, srv Servers, opts ServiceOptions, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	return &Service{db: db, box: box, servers: srv, opts: opts, log: log, sessions: newRegistry()}
}

// Credentials are what a token's user logs in to one server's files
// with. Password is a secret: LogValue leaves it out.
type Credentials struct {
	Username         string // the token's label
	Password         string
	ComputedUsername string // what one logs in with: username.<8 hex of the server id>
	Host             string
	Port             int
	URI              string // sftp://computed@host:port
}

// LogValue keeps the password out of logs.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", c.ComputedUsername), slog.String("password", "[REDACTED]"))
}

// passwordLen is the length of a generated password: 32 base62
// characters, ≈190 bits (no throttling is needed to make guessing
// hopeless; the lockout is for noise).
const passwordLen = 32

// Credentials returns the SFTP credentials of token tokenID (labelled
// tokenLabel) on server serverID of team teamID, creating them the first
// time; with rotate, an existing password is replaced by a new one and
// every session opened with the old one ends at once. Errors:
// servers.ErrNotFound (no such server in the team), *validate.Error (a
// label that makes no username).
func (s *Service) Credentials(ctx context.Context, teamID, tokenID, tokenLabel, serverID string, rotate bool) (Credentials, error) {
	username, err := Username(tokenLabel)
	if err != nil {
		return Credentials{}, err
	}
	if _, err := s.servers.Get(ctx, teamID, serverID); err != nil {
		return Credentials{}, err
	}
	login := username + "." + serverPrefix(serverID)
	row, err := s.find(ctx, tokenID, serverID)
	created := false
	if errors.Is(err, sql.ErrNoRows) {
		row, err = s.insert(ctx, teamID, tokenID, serverID, username, login)
		created = true
	}
	if err != nil {
		return Credentials{}, err
	}
	if rotate && !created {
		if row, err = s.rotate(ctx, row); err != nil {
			return Credentials{}, err
		}
	}
	p, err := s.box.Open(row.sealed)
	if err != nil {
		return Credentials{}, fmt.Errorf("open the sftp password of %s: %w", row.id, err)
	}
	host := s.opts.PublicHost
	return Credentials{
		Username:         row.username,
		Password:         string(p),
		ComputedUsername: row.login,
		Host:             host,
		Port:             s.opts.Port,
		URI:              "sftp://" + row.login + "@" + net.JoinHostPort(host, strconv.Itoa(s.opts.Port)),
	}, nil
}

// Username is the SFTP username of a token label: lower case, the
// characters [a-z0-9_-] only (a token's label already is; anything else
// is dropped). Errors: *validate.Error when nothing is left.
func Username(label string) (string, error) {
	var b strings.Builder
	for _, c := range strings.ToLower(label) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteRune(c)
		}
	}
	if b.Len() == 0 || b.Len() > 64 {
		return "", validate.Errorf("token", "the token's label makes no SFTP username (1-64 characters of a-z, 0-9, '_' and '-')")
	}
	return b.String(), nil
}

// serverPrefix is the first 8 hex digits of a server's UUID, lower case.
func serverPrefix(serverID string) string {
	p := strings.ToLower(strings.ReplaceAll(serverID, "-", ""))
	if len(p) > 8 {
		p = p[:8]
	}
	return p
}

// credRow is a stored credential (its password sealed).
type credRow struct {
	id, teamID, tokenID, serverID string
	username, login, sealed       string
	generation                    int64
}

const credColumns = `id, team_id, token_id, server_id, username, login, password_sealed, generation`

func scanCred(sc interface{ Scan(...any) error }) (credRow, error) {
	var c credRow
	err := sc.Scan(&c.id, &c.teamID, &c.tokenID, &c.serverID, &c.username, &c.login, &c.sealed, &c.generation)
	return c, err
}

// find reads the credential of (token, server); sql.ErrNoRows when none.
func (s *Service) find(ctx context.Context, tokenID, serverID string) (credRow, error) {
	c, err := scanCred(s.db.Write().QueryRowContext(ctx, `SELECT `+credColumns+` FROM sftp_credentials
		WHERE token_id = $1 AND server_id = $2`, tokenID, serverID))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("read sftp credentials: %w", err)
	}
	return c, err
}

// insert creates the credential of (token, server); a racing insert of
// the same pair keeps the first, which is returned.
func (s *Service) insert(ctx context.Context, teamID, tokenID, serverID, username, login string) (credRow, error) {
	sealed, err := s.box.Seal([]byte(ids.RandomBase62(passwordLen)))
	if err != nil {
		return credRow{}, fmt.Errorf("seal an sftp password: %w", err)
	}
	now := store.Now()
	_, err = s.db.Write().ExecContext(ctx, `INSERT INTO sftp_credentials (id, team_id, token_id, server_id, username, login,
		password_sealed, generation, created_at, rotated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9)
		ON CONFLICT (token_id, server_id) DO NOTHING`,
		ids.New("sftp"), teamID, tokenID, serverID, username, login, sealed, now, now)
	if store.IsForeignKeyViolation(err) {
		return credRow{}, servers.ErrNotFound // deleted meanwhile (or an unknown token)
	}
	if err != nil {
		return credRow{}, fmt.Errorf("record sftp credentials: %w", err)
	}
	return s.find(ctx, tokenID, serverID)
}

// rotate gives c a new password and ends the sessions it opened. Two
// rotations at once: the one whose update lost reads the winner's.
func (s *Service) rotate(ctx context.Context, c credRow) (credRow, error) {
	sealed, err := s.box.Seal([]byte(ids.RandomBase62(passwordLen)))
	if err != nil {
		return credRow{}, fmt.Errorf("seal an sftp password: %w", err)
	}
	_, err = s.db.Write().ExecContext(ctx, `UPDATE sftp_credentials SET password_sealed = $1, generation = generation + 1,
		rotated_at = $2 WHERE id = $3 AND generation = $4`, sealed, store.Now(), c.id, c.generation)
	if err != nil {
		return credRow{}, fmt.Errorf("rotate sftp credentials: %w", err)
	}
	s.sessions.cut(func(se *session) bool { return se.cred.id == c.id }, "credentials rotated")
	return s.find(ctx, c.tokenID, c.serverID)
}

// RevokeServer ends every SFTP session on serverID at once and refuses
// new ones (a login with its credentials fails from now on). It has the
// shape of servers.Service.OnDelete's hook: Kiln calls it before a server
// is deleted. The credentials' rows go with the server's row (ON DELETE
// CASCADE), not here: a delete that fails after this leaves the server
// with its credentials, and DeleteEnded lets them log in again.
func (s *Service) RevokeServer(_ context.Context, serverID string) error {
	s.sessions.closeServer(serverID, "server deleted")
	return nil
}

// ServerHeld ends every SFTP session on serverID at once: a snapshot is
// being restored into it (servers.Service.OnHold), and a file a session
// holds open for writing would take writes the restore's swap discards.
// New sessions open meanwhile; their writes are refused until the restore
// is done.
func (s *Service) ServerHeld(serverID string) {
	s.sessions.cut(func(se *session) bool { return se.cred.serverID == serverID }, "a snapshot is being restored into the server")
}

// DeleteEnded drops RevokeServer's mark when the server's delete ends
// (servers.OnDeleteEnded). If it failed and the server stays, its
// credentials log in again; if its row is gone, a login with them finds
// nothing and a session that got past the login before finds no server
// root, so the mark would only be memory kept for the process's life.
func (s *Service) DeleteEnded(serverID string) { s.sessions.forget(serverID) }

// RevokeToken ends at once every SFTP session opened with credentials of
// token tokenID (a revocation in this process; one made by another
// process, `kiln admin token revoke`, is found by Server's re-check within
// its interval). Logins with them already fail: a login checks the token.
func (s *Service) RevokeToken(tokenID string) {
	s.sessions.cut(func(se *session) bool { return se.cred.tokenID == tokenID }, "token revoked")
}

// maxLoginCandidates bounds the rows one login name is tried against
// (tokens sharing a label on one server, servers sharing an 8-hex prefix).
const maxLoginCandidates = 16

// errBadLogin is every refused login: the client learns nothing more.
var errBadLogin = errors.New("sftp: wrong username or password")

// login returns the credential whose login name is user and whose
// password is password, if its token is not revoked (its server exists:
// credentials go with their server). Passwords are compared in constant
// time. Errors: errBadLogin.
func (s *Service) login(ctx context.Context, user string, password []byte) (credRow, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT c.id, c.team_id, c.token_id, c.server_id, c.username, c.login,
		c.password_sealed, c.generation FROM sftp_credentials c JOIN tokens t ON t.id = c.token_id
		WHERE c.login = $1 AND t.revoked_at IS NULL ORDER BY c.id LIMIT `+strconv.Itoa(maxLoginCandidates), user)
	if err != nil {
		return credRow{}, fmt.Errorf("look up sftp login: %w", err)
	}
	defer rows.Close()
	var match credRow
	found := 0
	for rows.Next() {
		c, err := scanCred(rows)
		if err != nil {
			return credRow{}, fmt.Errorf("look up sftp login: %w", err)
		}
		p, err := s.box.Open(c.sealed)
		if err != nil {
			return credRow{}, fmt.Errorf("open the sftp password of %s: %w", c.id, err)
		}
		if subtle.ConstantTimeCompare(p, password) == 1 {
			match = c
			found++
		}
	}
	if err := rows.Err(); err != nil {
		return credRow{}, fmt.Errorf("look up sftp login: %w", err)
	}
	if found != 1 {
		return credRow{}, errBadLogin
	}
	return match, nil
}

// credState is what the re-check reads of a credential.
type credState struct {
	generation int64
	revoked    bool
}

// states reads the generation and token state of credentials ids; a
// credential missing from the answer is gone (its server deleted).
func (s *Service) states(ctx context.Context, ids []string) (map[string]credState, error) {
	out := make(map[string]credState, len(ids))
	const batch = 500
	for len(ids) > 0 {
		n := min(batch, len(ids))
		args := make([]any, n)
		ph := make([]string, n)
		for i := range n {
			args[i] = ids[i]
			ph[i] = "$" + strconv.Itoa(i+1)
		}
		rows, err := s.db.Read().QueryContext(ctx, `SELECT c.id, c.generation, t.revoked_at FROM sftp_credentials c
			JOIN tokens t ON t.id = c.token_id WHERE c.id IN (`+strings.Join(ph, ", ")+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("re-check sftp credentials: %w", err)
		}
		for rows.Next() {
			var id string
			var st credState
			var revoked sql.NullInt64
			if err := rows.Scan(&id, &st.generation, &revoked); err != nil {
				rows.Close()
				return nil, fmt.Errorf("re-check sftp credentials: %w", err)
			}
			st.revoked = revoked.Valid
			out[id] = st
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("re-check sftp credentials: %w", err)
		}
		ids = ids[n:]
	}
	return out, nil
}
