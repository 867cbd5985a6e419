package dbservice

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
)

// Owner names a dbservice: its configuration and resource key
// (dbservice/stats).
type Owner struct {
	ConfigurationID string
	ResourceKey     string
}

// Database is a dbservice as made: where it lives and under which names
// (never its password).
type Database struct {
	ID       string
	TeamID   string
	HostID   string
	HostName string
	Engine   string
	Name     string // the database's name on the host
	User     string
	Address  string   // host:port as game servers reach it
	Attach   []string // the configuration's servers that get its credentials
}

// Ensure makes the database of o on a host of engine — or finds the one
// made before, by an earlier attempt or a process that crashed — and
// records attach (the servers that get its credentials). Its user may
// hold maxConnections connections at once (0: MaxConnections), set anew
// on a user that exists (ALTER ROLE, ALTER USER). Idempotent: the row is
// written first, then the database and user are created on the host as
// it names them. Errors: ErrNoHost, *HostError.
func (s *Service) Ensure(ctx context.Context, teamID string, o Owner, engineName string, attach []string, maxConnections int) (Database, error) {
	e, ok := engines[engineName]
	if !ok {
		return Database{}, fmt.Errorf("engine %q is not supported", engineName)
	}
	if maxConnections < 0 {
		return Database{}, fmt.Errorf("%s: connection limit %d", o.ResourceKey, maxConnections)
	}
	if maxConnections == 0 {
		maxConnections = MaxConnections
	}
	attach = slices.Sorted(slices.Values(attach))
	d, err := s.find(ctx, s.db.Write(), teamID, o)
	if errors.Is(err, ErrNotFound) {
		d, err = s.insert(ctx, teamID, o, engineName, attach)
	}
	if err != nil {
		return Database{}, err
	}
	if d.Engine != engineName {
		return Database{}, fmt.Errorf("%s is a %s database; its engine cannot change in place", o.ResourceKey, d.Engine)
	}
	if !slices.Equal(d.Attach, attach) {
		if err := s.setAttach(ctx, d.ID, attach); err != nil {
			return Database{}, err
		}
		d.Attach = attach
	}
	h, err := s.hostConn(ctx, s.db.Read(), d.HostID)
	if err != nil {
		return Database{}, err
	}
	password, err := s.password(ctx, d.ID)
	if err != nil {
		return Database{}, err
	}
	if err := onHost(ctx, e, h, "create the database", func(db *sql.DB) error { return e.ensure(ctx, db, d.Name, d.User, password, maxConnections) }); err != nil {
		return Database{}, err
	}
	return d, nil
}

// insert writes o's row on the emptiest host of the engine; a racing
// insert of the same key (a resumed step) keeps the first.
func (s *Service) insert(ctx context.Context, teamID string, o Owner, engineName string, attach []string) (Database, error) {
	for range 3 {
		var hostID string
		err := s.db.Read().QueryRowContext(ctx, `SELECT h.id FROM db_hosts h WHERE h.engine = $1
			ORDER BY (SELECT count(*) FROM db_services d WHERE d.host_id = h.id), h.created_at, h.id LIMIT 1`, engineName).Scan(&hostID)
		if errors.Is(err, sql.ErrNoRows) {
			return Database{}, ErrNoHost
		}
		if err != nil {
			return Database{}, fmt.Errorf("choose a %s host: %w", engineName, err)
		}
		name := dbName(o.ResourceKey)
		sealed, err := s.box.Seal([]byte(ids.RandomBase62(32)))
		if err != nil {
			return Database{}, fmt.Errorf("seal the password of %s: %w", o.ResourceKey, err)
		}
		at, _ := json.Marshal(attach)
		now := store.Now()
		_, err = s.db.Write().ExecContext(ctx, `INSERT INTO db_services (id, team_id, configuration_id, resource_key, host_id,
			engine, db_name, db_user, password_sealed, attach, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (configuration_id, resource_key) DO NOTHING`,
			ids.New("dbs"), teamID, o.ConfigurationID, o.ResourceKey, hostID, engineName, name, name, sealed, string(at), now, now)
		if store.IsForeignKeyViolation(err) {
			continue // the host was removed meanwhile: choose again
		}
		if err != nil {
			return Database{}, fmt.Errorf("record %s: %w", o.ResourceKey, err)
		}
		return s.find(ctx, s.db.Write(), teamID, o)
	}
	return Database{}, ErrNoHost
}

// dbName is "kiln_" + the dbservice's name (≤ 20 characters, "-" as "_")
// + "_" + 10 random lower-case letters and digits.
func dbName(resourceKey string) string {
	_, name, _ := strings.Cut(resourceKey, "/")
	name = strings.ReplaceAll(name, "-", "_")
	if len(name) > 20 {
		name = name[:20]
	}
	return "kiln_" + name + "_" + strings.ToLower(ids.RandomBase62(10))
}

type querier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

const dbColumns = `d.id, d.team_id, d.host_id, h.name, d.engine, d.db_name, d.db_user, h.address, d.attach`

func scanDB(row *sql.Row) (Database, error) {
	var d Database
	var attach string
	if err := row.Scan(&d.ID, &d.TeamID, &d.HostID, &d.HostName, &d.Engine, &d.Name, &d.User, &d.Address, &attach); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(attach), &d.Attach); err != nil {
		return d, fmt.Errorf("dbservice %s attach: %w", d.ID, err)
	}
	return d, nil
}

// Find returns the database made for o. Errors: ErrNotFound.
func (s *Service) Find(ctx context.Context, teamID string, o Owner) (Database, error) {
	return s.find(ctx, s.db.Read(), teamID, o)
}

func (s *Service) find(ctx context.Context, q querier, teamID string, o Owner) (Database, error) {
	d, err := scanDB(q.QueryRowContext(ctx, `SELECT `+dbColumns+` FROM db_services d JOIN db_hosts h ON h.id = d.host_id
		WHERE d.configuration_id = $1 AND d.resource_key = $2 AND d.team_id = $3`, o.ConfigurationID, o.ResourceKey, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("find %s: %w", o.ResourceKey, err)
	}
	return d, nil
}

func (s *Service) setAttach(ctx context.Context, id string, attach []string) error {
	at, _ := json.Marshal(attach)
	if _, err := s.db.Write().ExecContext(ctx, `UPDATE db_services SET attach = $1, updated_at = $2 WHERE id = $3`,
		string(at), store.Now(), id); err != nil {
		return fmt.Errorf("record the servers of %s: %w", id, err)
	}
	return nil
}

func (s *Service) password(ctx context.Context, id string) (string, error) {
	var sealed string
	if err := s.db.Write().QueryRowContext(ctx, `SELECT password_sealed FROM db_services WHERE id = $1`, id).Scan(&sealed); err != nil {
		return "", fmt.Errorf("read the password of %s: %w", id, err)
	}
	p, err := s.box.Open(sealed)
	if err != nil {
		return "", fmt.Errorf("open the password of %s: %w", id, err)
	}
	return string(p), nil
}

// onHost connects to h as its admin and runs fn, which does something (a
// phrase: "create the database"); every failure is the host's
// (*HostError), its message free of the DSN.
func onHost(ctx context.Context, e engine, h hostConn, doing string, fn func(db *sql.DB) error) error {
	db, err := e.open(h.dsn)
	if err != nil {
		return hostError(h.name, scrub(err, h.dsn), doing)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := fn(db); err != nil {
		return hostError(h.name, scrub(err, h.dsn), doing)
	}
	return nil
}

// Detach records that o's database is attached to no server any more
// (it is about to be deleted: the servers restarted before that must not
// get its credentials). None made is not an error.
func (s *Service) Detach(ctx context.Context, teamID string, o Owner) error {
	d, err := s.find(ctx, s.db.Write(), teamID, o)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(d.Attach) == 0 {
		return nil
	}
	return s.setAttach(ctx, d.ID, []string{})
}

// Drop drops o's database and user from their host, then forgets them.
// None made (already dropped: a resumed step) is not an error; a host
// that cannot be reached keeps the row, for the next attempt. Errors:
// *HostError.
func (s *Service) Drop(ctx context.Context, teamID string, o Owner) error {
	d, err := s.find(ctx, s.db.Write(), teamID, o)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	h, err := s.hostConn(ctx, s.db.Read(), d.HostID)
	if err != nil {
		return err
	}
	e := engines[d.Engine]
	if err := onHost(ctx, e, h, "drop the database", func(db *sql.DB) error { return e.drop(ctx, db, d.Name, d.User) }); err != nil {
		return err
	}
	if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM db_services WHERE id = $1`, d.ID); err != nil {
		return fmt.Errorf("forget %s: %w", o.ResourceKey, err)
	}
	return nil
}

// InjectedEnv is the environment Kiln adds to the server that
// configurationID's key serverKey (server/lobby) names: the credentials
// of every dbservice of the configuration attached to it (see doc.go for
// the names). Nil when none is.
func (s *Service) InjectedEnv(ctx context.Context, configurationID, serverKey string) (map[string]string, error) {
	kind, server, ok := strings.Cut(serverKey, "/")
	if !ok || kind != "server" {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT d.resource_key, d.engine, d.db_name, d.db_user, d.password_sealed, h.address, d.attach
		FROM db_services d JOIN db_hosts h ON h.id = d.host_id WHERE d.configuration_id = $1 ORDER BY d.resource_key`, configurationID)
	if err != nil {
		return nil, fmt.Errorf("read the databases of %s: %w", serverKey, err)
	}
	defer rows.Close()
	var env, plain map[string]string
	for rows.Next() {
		var key, engineName, name, user, sealed, address, attachJSON string
		if err := rows.Scan(&key, &engineName, &name, &user, &sealed, &address, &attachJSON); err != nil {
			return nil, fmt.Errorf("read the databases of %s: %w", serverKey, err)
		}
		var attach []string
		if err := json.Unmarshal([]byte(attachJSON), &attach); err != nil || !slices.Contains(attach, server) {
			continue
		}
		p, err := s.box.Open(sealed)
		if err != nil {
			return nil, fmt.Errorf("open the password of %s: %w", key, err)
		}
		c := credentials(engineName, address, name, user, string(p))
		vars := map[string]string{
			"HOST": c.Host, "PORT": c.Port, "NAME": c.Name, "USER": c.User, "PASSWORD": c.Password,
			"URL": c.URL, "JDBC_URL": c.JDBCURL,
		}
		_, dbsName, _ := strings.Cut(key, "/")
		prefix := "DB_" + strings.ToUpper(strings.ReplaceAll(dbsName, "-", "_")) + "_"
		if env == nil {
			env, plain = map[string]string{}, map[string]string{}
			for k, v := range vars {
				plain["DB_"+k] = v
			}
		}
		for k, v := range vars {
			env[prefix+k] = v
		}
	}
	// The plain names win over a prefixed one they collide with (a
	// dbservice called "jdbc" makes DB_JDBC_URL twice).
	maps.Copy(env, plain)
	return env, rows.Err()
}

// Credentials are what a game server needs to use a dbservice's database:
// its DB_* variables, and the values of a spec's ${dbservices.NAME.…}
// references. They hold the password: LogValue redacts it.
type Credentials struct {
	Host, Port, Name, User, Password string
	URL                              string // postgresql:// or mariadb://, with the password
	JDBCURL                          string // without credentials
}

// LogValue keeps the password and the URL that holds it out of logs.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("host", c.Host), slog.String("port", c.Port), slog.String("name", c.Name),
		slog.String("user", c.User))
}

// credentials are the credentials of a database of engineName at
// address (host:port as game servers reach it).
func credentials(engineName, address, name, user, password string) Credentials {
	host, port, _ := net.SplitHostPort(address)
	e := engines[engineName]
	return Credentials{Host: host, Port: port, Name: name, User: user, Password: password,
		URL: e.url(host, port, name, user, password), JDBCURL: e.jdbc(host, port, name)}
}

// Credentials returns the credentials of the database made for o, read
// now (a password set anew since is the new one). Errors: ErrNotFound
// (not made yet, or another team's).
func (s *Service) Credentials(ctx context.Context, teamID string, o Owner) (Credentials, error) {
	d, err := s.find(ctx, s.db.Read(), teamID, o)
	if err != nil {
		return Credentials{}, err
	}
	p, err := s.password(ctx, d.ID)
	if err != nil {
		return Credentials{}, err
	}
	return credentials(d.Engine, d.Address, d.Name, d.User, p), nil
}
