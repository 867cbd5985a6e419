package dbservice

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Errors callers tell apart.
var (
	ErrHostNotFound  = errors.New("database host not found")
	ErrHostNameTaken = errors.New("a database host with this name exists")
	// ErrNoHost: no host of the engine is registered (a run's capacity
	// failure).
	ErrNoHost   = errors.New("no database host is registered for this engine")
	ErrNotFound = errors.New("dbservice not found")
)

// HostInUseError refuses removing a host databases still live on.
type HostInUseError struct {
	Host     string
	Services int
}

func (e *HostInUseError) Error() string {
	return fmt.Sprintf("database host %s still holds %d database(s) of deployments; remove those dbservices from their specs and apply them first", e.Host, e.Services)
}

// HostError is a failure of a host itself (unreachable, login refused, a
// statement refused): a run's dependency failure. It never carries the
// DSN. Err, the detail, names what only the operator may read (the admin
// role, the maintenance database, the host's address, the driver's
// message): Error gives it, for the log and the operator's `kiln admin`.
// Reason is the short sentence a team reads instead (Public).
type HostError struct {
	Host   string // the host's name
	Reason string // "database host unavailable", "… refused Kiln's login", …
	Err    error
}

func (e *HostError) Error() string { return fmt.Sprintf("database host %s: %v", e.Host, e.Err) }
func (e *HostError) Unwrap() error { return e.Err }

// Public is the sentence a team may read: Reason.
func (e *HostError) Public() string { return e.Reason }

// hostError is err, a failure on host name while Kiln tried to do
// something (a phrase: "create the database"), as a *HostError.
func hostError(name string, err error, doing string) *HostError {
	return &HostError{Host: name, Reason: reason(err, doing), Err: err}
}

// reason is what a team reads of a host's failure: whether the host did
// not answer, refused the admin's login, or refused a statement; never
// what the driver says (it names the admin role, the maintenance
// database and the address).
func reason(err error, doing string) string {
	var pe *pgconn.PgError
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &pe):
		// Class 28: invalid authorization; 3D000: the DSN's database does
		// not exist; 53300: too many connections; 57P03: starting up.
		switch {
		case strings.HasPrefix(pe.Code, "28"), pe.Code == "3D000":
			return "database host refused Kiln's login"
		case pe.Code == "53300", pe.Code == "57P03":
			return "database host unavailable"
		}
		return "database host refused to " + doing
	case errors.As(err, &me):
		switch me.Number {
		case 1044, 1045, 1049, 1130, 1129: // access denied (database, user), unknown database, host not allowed or blocked
			return "database host refused Kiln's login"
		case 1040, 1203: // too many connections
			return "database host unavailable"
		}
		return "database host refused to " + doing
	}
	return "database host unavailable"
}

// Sealer seals and opens secrets (*secretbox.Box).
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

// Service registers hosts and makes and drops databases on them.
type Service struct {
	db  *store.DB
	box Sealer
	log *slog.Logger
}

// NewService returns a Service storing in db, sealing with box.
func NewService(db *store.DB, box Sealer, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, box: box, log: log}
}

// Host is a registered database host, without its DSN.
type Host struct {
	ID        string
	Name      string
	Engine    string
	Address   string // host:port as game servers reach it
	Services  int    // dbservices on it
	CreatedAt int64
}

var hostName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// AddHost registers a host of engine reached with dsn (its admin's URL),
// after logging in with it; address ("" = the DSN's host:port) is where
// game servers reach it. Errors: *validate.Error, ErrHostNameTaken,
// *HostError (the login failed).
func (s *Service) AddHost(ctx context.Context, name, engineName, dsn, address string) (Host, error) {
	var c validate.Collector
	if !hostName.MatchString(name) {
		c.Add("name", "must be 1 to 63 characters: a lower-case letter, then lower-case letters, digits or -")
	}
	e, ok := engines[engineName]
	if !ok {
		c.Add("engine", "must be postgres or mariadb")
	}
	dsnAddr := ""
	if ok {
		var err error
		if dsnAddr, err = parseDSN(engineName, dsn); err != nil {
			c.Add("dsn", "%v", err)
		}
	}
	if address == "" {
		address = dsnAddr
	} else if h, p, err := net.SplitHostPort(address); err != nil || h == "" || !validPort(p) {
		c.Add("address", "must be host:port, e.g. 10.0.0.5:5432")
	}
	if err := c.Err(); err != nil {
		return Host{}, err
	}
	if err := ping(ctx, e, dsn); err != nil {
		return Host{}, hostError(name, err, "log Kiln in")
	}
	sealed, err := s.box.Seal([]byte(dsn))
	if err != nil {
		return Host{}, fmt.Errorf("seal the DSN: %w", err)
	}
	h := Host{ID: ids.New("dbh"), Name: name, Engine: engineName, Address: address, CreatedAt: store.Now()}
	_, err = s.db.Write().ExecContext(ctx, `INSERT INTO db_hosts (id, name, engine, address, dsn_sealed, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, h.ID, h.Name, h.Engine, h.Address, sealed, h.CreatedAt)
	if store.IsUniqueViolation(err) {
		return Host{}, ErrHostNameTaken
	}
	if err != nil {
		return Host{}, fmt.Errorf("store database host %s: %w", name, err)
	}
	return h, nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536
}

// ping logs in to a host and runs one statement.
func ping(ctx context.Context, e engine, dsn string) error {
	db, err := e.open(dsn)
	if err != nil {
		return scrub(err, dsn)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var one int
	if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return scrub(err, dsn)
	}
	return nil
}

// scrub keeps a driver's error from repeating the DSN (some quote the
// connection string they could not parse).
func scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	if msg := err.Error(); dsn != "" && containsSecret(msg, dsn) {
		return errors.New("the connection failed (the driver's message quoted the DSN and is withheld)")
	}
	return err
}

// Hosts lists the registered hosts by name.
func (s *Service) Hosts(ctx context.Context) ([]Host, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT h.id, h.name, h.engine, h.address, h.created_at,
		(SELECT count(*) FROM db_services d WHERE d.host_id = h.id) FROM db_hosts h ORDER BY h.name`)
	if err != nil {
		return nil, fmt.Errorf("list database hosts: %w", err)
	}
	defer rows.Close()
	var out []Host
	for rows.Next() {
		var h Host
		if err := rows.Scan(&h.ID, &h.Name, &h.Engine, &h.Address, &h.CreatedAt, &h.Services); err != nil {
			return nil, fmt.Errorf("list database hosts: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// RemoveHost unregisters the host with this id or name. Errors:
// ErrHostNotFound, *HostInUseError.
func (s *Service) RemoveHost(ctx context.Context, idOrName string) (Host, error) {
	var h Host
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT h.id, h.name, h.engine, h.address, h.created_at,
			(SELECT count(*) FROM db_services d WHERE d.host_id = h.id) FROM db_hosts h WHERE h.id = $1 OR h.name = $1`,
			idOrName).Scan(&h.ID, &h.Name, &h.Engine, &h.Address, &h.CreatedAt, &h.Services)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrHostNotFound
		}
		if err != nil {
			return fmt.Errorf("read database host %s: %w", idOrName, err)
		}
		if h.Services > 0 {
			return &HostInUseError{Host: h.Name, Services: h.Services}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM db_hosts WHERE id = $1`, h.ID)
		if store.IsForeignKeyViolation(err) {
			return &HostInUseError{Host: h.Name, Services: 1}
		}
		return err
	})
	return h, err
}

// hostConn is what a step needs of a host: its engine, DSN and address.
type hostConn struct {
	name, engine, address, dsn string
}

func (s *Service) hostConn(ctx context.Context, q querier, id string) (hostConn, error) {
	var h hostConn
	var sealed string
	err := q.QueryRowContext(ctx, `SELECT name, engine, address, dsn_sealed FROM db_hosts WHERE id = $1`, id).
		Scan(&h.name, &h.engine, &h.address, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return h, ErrHostNotFound
	}
	if err != nil {
		return h, fmt.Errorf("read database host %s: %w", id, err)
	}
	dsn, err := s.box.Open(sealed)
	if err != nil {
		return h, fmt.Errorf("open the DSN of database host %s: %w", h.name, err)
	}
	h.dsn = string(dsn)
	return h, nil
}

// containsSecret reports whether msg repeats the DSN or its password.
func containsSecret(msg, dsn string) bool {
	if strings.Contains(msg, dsn) {
		return true
	}
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return false
	}
	p, ok := u.User.Password()
	return ok && p != "" && strings.Contains(msg, p)
}
