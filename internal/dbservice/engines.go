package dbservice

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Engines a host may run (the spec's dbservice engine values).
const (
	Postgres = "postgres"
	MariaDB  = "mariadb"
)

// dialTimeout bounds a connection to a host.
const dialTimeout = 5 * time.Second

// engine creates and drops databases and users on one kind of host.
type engine interface {
	// open connects to the host as its admin (the DSN).
	open(dsn string) (*sql.DB, error)
	// ensure makes the database and the user (password and connection
	// limit set anew when the user exists): idempotent.
	ensure(ctx context.Context, db *sql.DB, name, user, password string, limit int) error
	// drop removes both; missing ones are not an error.
	drop(ctx context.Context, db *sql.DB, name, user string) error
	// url is the URL of DB_URL, jdbc that of DB_JDBC_URL.
	url(host, port, name, user, password string) string
	jdbc(host, port, name string) string
}

var engines = map[string]engine{Postgres: postgres{}, MariaDB: mariadb{}}

// parseDSN checks a DSN of engine and returns the host:port it names.
func parseDSN(engineName, dsn string) (address string, err error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("the DSN must be a URL such as %s", example(engineName))
	}
	ok := false
	switch engineName {
	case Postgres:
		ok = u.Scheme == "postgres" || u.Scheme == "postgresql"
	case MariaDB:
		ok = u.Scheme == "mariadb" || u.Scheme == "mysql"
	}
	if !ok {
		return "", fmt.Errorf("a %s DSN starts with %s", engineName, strings.SplitAfter(example(engineName), "//")[0])
	}
	if u.User == nil || u.User.Username() == "" {
		return "", fmt.Errorf("the DSN must name the admin user, e.g. %s", example(engineName))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{Postgres: "5432", MariaDB: "3306"}[engineName]
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func example(engineName string) string {
	if engineName == MariaDB {
		return "mariadb://root:secret@db.example:3306/"
	}
	return "postgres://kiln:secret@db.example:5432/postgres?sslmode=disable"
}

type postgres struct{}

func (postgres) open(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", strconv.Itoa(int(dialTimeout/time.Second)))
	}
	u.RawQuery = q.Encode()
	return sql.Open("pgx", u.String())
}

// MaxConnections is how many connections one dbservice's user may hold
// at once on its host (PostgreSQL CONNECTION LIMIT, MariaDB
// MAX_USER_CONNECTIONS) unless its spec says otherwise (max_connections,
// at most spec.MaxMaxConnections): one tenant cannot take every
// connection of a shared host (ERROR 1040 for the others). A Minecraft
// server's pool (HikariCP, LuckPerms' default 10) fits with room for a
// second server attached to the same database.
const MaxConnections = 20

// grantName is name as a MariaDB grant's database pattern matching it
// alone: "_" and "%" (wildcards there) and the backslash escaped.
func grantName(name string) string {
	return strings.NewReplacer(`\`, `\\`, "_", `\_`, "%", `\%`).Replace(name)
}

// scramVerifier is the SCRAM-SHA-256 verifier of password (RFC 5802,
// RFC 7677, PostgreSQL's format), so the host receives the verifier and
// never the password: a host that logs DDL (log_statement = ddl) logs
// nothing it could log in with. PostgreSQL's own iteration count (4096)
// and a 16-byte random salt. Kiln's passwords are ASCII letters and
// digits, which SASLprep leaves as they are.
func scramVerifier(password string) (string, error) {
	const iterations = 4096
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("scram verifier: %w", err)
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// nativeHash is MariaDB's mysql_native_password hash of password ("*"
// and the upper-case hex of SHA1(SHA1(password))), given with IDENTIFIED
// BY PASSWORD so the host never receives the password itself.
func nativeHash(password string) string {
	first := sha1.Sum([]byte(password))
	second := sha1.Sum(first[:])
	return "*" + strings.ToUpper(hex.EncodeToString(second[:]))
}

// pgIdent quotes a PostgreSQL identifier.
func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// sqlString quotes a string literal (DDL takes no parameters).
func sqlString(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

func (postgres) ensure(ctx context.Context, db *sql.DB, name, user, password string, limit int) error {
	var exists, super bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
		(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`, user).Scan(&exists, &super); err != nil {
		return fmt.Errorf("look up role %s: %w", user, err)
	}
	verb := "CREATE"
	if exists {
		verb = "ALTER"
	}
	verifier, err := scramVerifier(password)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, verb+` ROLE `+pgIdent(user)+` WITH LOGIN CONNECTION LIMIT `+strconv.Itoa(limit)+` PASSWORD `+sqlString(verifier)); err != nil {
		return fmt.Errorf("%s role %s: %w", strings.ToLower(verb), user, err)
	}
	if !super {
		if _, err := db.ExecContext(ctx, `GRANT `+pgIdent(user)+` TO CURRENT_USER`); err != nil {
			return fmt.Errorf("grant role %s to the admin: %w", user, err)
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := db.ExecContext(ctx, `CREATE DATABASE `+pgIdent(name)+` OWNER `+pgIdent(user)); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	if _, err := db.ExecContext(ctx, `REVOKE ALL ON DATABASE `+pgIdent(name)+` FROM PUBLIC`); err != nil {
		return fmt.Errorf("revoke public access to %s: %w", name, err)
	}
	return nil
}

func (postgres) drop(ctx context.Context, db *sql.DB, name, user string) error {
	if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+pgIdent(name)+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := db.ExecContext(ctx, `DROP ROLE IF EXISTS `+pgIdent(user)); err != nil {
		return fmt.Errorf("drop role %s: %w", user, err)
	}
	return nil
}

func (postgres) url(host, port, name, user, password string) string {
	return (&url.URL{Scheme: "postgresql", User: url.UserPassword(user, password), Host: net.JoinHostPort(host, port), Path: "/" + name}).String()
}

func (postgres) jdbc(host, port, name string) string {
	return "jdbc:postgresql://" + net.JoinHostPort(host, port) + "/" + name
}

type mariadb struct{}

func (mariadb) open(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	c := mysql.NewConfig()
	c.Net, c.Addr = "tcp", u.Host
	if u.Port() == "" {
		c.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.Timeout, c.ReadTimeout, c.WriteTimeout = dialTimeout, time.Minute, time.Minute
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// myIdent quotes a MariaDB identifier.
func myIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func (mariadb) ensure(ctx context.Context, db *sql.DB, name, user, password string, maxConns int) error {
	account := sqlString(user) + `@'%'`
	hash := sqlString(nativeHash(password))
	limit := ` WITH MAX_USER_CONNECTIONS ` + strconv.Itoa(maxConns)
	for _, q := range []string{
		`CREATE DATABASE IF NOT EXISTS ` + myIdent(name) + ` CHARACTER SET utf8mb4`,
		`CREATE USER IF NOT EXISTS ` + account + ` IDENTIFIED BY PASSWORD ` + hash + limit,
		`ALTER USER ` + account + ` IDENTIFIED BY PASSWORD ` + hash + limit,
		// In a grant's database name "_" and "%" are wildcards: escaped,
		// the grant is for this database only (unescaped, "kiln_a" also
		// matched "kilnXa", which the tenant could then create).
		`GRANT ALL PRIVILEGES ON ` + myIdent(grantName(name)) + `.* TO ` + account,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create database %s and user %s: %w", name, user, err)
		}
	}
	// The wildcard grant an earlier Kiln gave (unescaped) goes: ERROR 1141
	// (no such grant) means there was none.
	if grantName(name) != name {
		_, err := db.ExecContext(ctx, `REVOKE ALL PRIVILEGES ON `+myIdent(name)+`.* FROM `+account)
		if me, ok := errors.AsType[*mysql.MySQLError](err); err != nil && !(ok && me.Number == 1141) {
			return fmt.Errorf("revoke the wildcard grant of user %s: %w", user, err)
		}
	}
	return nil
}

func (mariadb) drop(ctx context.Context, db *sql.DB, name, user string) error {
	if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+myIdent(name)); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := db.ExecContext(ctx, `DROP USER IF EXISTS `+sqlString(user)+`@'%'`); err != nil {
		return fmt.Errorf("drop user %s: %w", user, err)
	}
	return nil
}

func (mariadb) url(host, port, name, user, password string) string {
	return (&url.URL{Scheme: "mariadb", User: url.UserPassword(user, password), Host: net.JoinHostPort(host, port), Path: "/" + name}).String()
}

func (mariadb) jdbc(host, port, name string) string {
	return "jdbc:mariadb://" + net.JoinHostPort(host, port) + "/" + name
}
