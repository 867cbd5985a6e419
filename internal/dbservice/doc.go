// Package dbservice owns the database hosts an operator registers and the
// databases deployment runs make on them (the dbservices of
// deployment-spec.md §4): `kiln admin dbhost add|list|remove`, a database
// and a user with a generated password per dbservice, created on a host of
// its engine (PostgreSQL or MariaDB), dropped when the dbservice is
// deleted, and the DB_* variables the servers it is attached to get in
// their environment.
//
// What it must never do: keep a host's DSN or a database user's password
// in plain text (both are sealed by internal/secretbox before they reach
// the database), log or return either (Host has no DSN field; errors name
// the host, never its DSN), create a second database for one resource key
// (the row keyed by configuration and key is written before anything is
// created on the host, and a retried or resumed step finds it), or touch
// a database it did not make (names are derived from the row, prefixed
// kiln_, and only those are created or dropped).
//
// Decisions (where the spec is silent):
//   - A host is chosen per dbservice when it is first created: the host of
//     its engine with the fewest dbservices (ties: the oldest). The choice
//     is kept; a host cannot be removed while a dbservice uses it.
//   - Adding a host logs in with its DSN first (5 s), so a typo is found by
//     the operator, not by a run. A registered host that later cannot be
//     reached fails a run's step with class dependency (after the
//     executor's retries); no host of the engine is class capacity, with a
//     sentence naming the command that adds one.
//   - What a team reads of a host's failure is HostError.Public, a few
//     words: "database host unavailable" (no answer, too many
//     connections), "database host refused Kiln's login" (the admin's
//     login or its database refused), "database host refused to create
//     the database" (or drop). The driver's message names the admin
//     role, the maintenance database and the host's address: it stays in
//     Error, for the log and the operator's `kiln admin dbhost add`.
//   - Names: database and user are both "kiln_" + the dbservice's name
//     (at most 20 characters, "-" as "_") + "_" + 10 random lower-case
//     letters and digits — under PostgreSQL's 63-byte and MariaDB's
//     64-byte limits, recognisable by an operator, unique per host. The
//     password is 32 base62 characters (≈190 bits), safe in URLs unquoted.
//   - PostgreSQL: a LOGIN role and a database it owns, CONNECT revoked from
//     PUBLIC; when the admin role is not a superuser it is made a member of
//     the new role first (PostgreSQL 15 requires it to give it a
//     database). Dropped with DROP DATABASE … WITH (FORCE), which ends the
//     server's open connections, then DROP ROLE.
//     MariaDB: CREATE DATABASE and CREATE USER 'user'@'%' with ALL
//     PRIVILEGES on that database only (its name escaped in the grant:
//     "_" and "%" are wildcards there); DROP DATABASE and DROP USER. Both
//     are idempotent: a step run again sets the same password on the user
//     that exists.
//   - The user: at most MaxConnections (20) connections at once, or the
//     dbservice's max_connections (1–100, checked by internal/deploy/spec)
//     (CONNECTION LIMIT, MAX_USER_CONNECTIONS), so one tenant cannot take
//     a shared host's every connection; every Ensure sets it again on a
//     user that exists (ALTER ROLE, ALTER USER), so a changed limit
//     applies to the connections made from then on (open ones stay); its password sent as a
//     SCRAM-SHA-256 verifier (PostgreSQL, computed here with
//     crypto/pbkdf2: pgx has no exported function for it) or a
//     mysql_native_password hash (MariaDB, IDENTIFIED BY PASSWORD), so a
//     host logging DDL never logs it.
//   - The environment: each attached server gets DB_<NAME>_HOST, _PORT,
//     _NAME, _USER, _PASSWORD, _URL and _JDBC_URL for every dbservice
//     attached to it (NAME upper-cased, "-" as "_"), and the plain DB_HOST,
//     DB_PORT, DB_NAME, DB_USER, DB_PASSWORD, DB_URL and DB_JDBC_URL of the
//     first of them by name — so the common case (one database) reads
//     DB_*, and two databases never overwrite each other. DB_URL is
//     postgresql://user:password@host:port/name or
//     mariadb://user:password@host:port/name; DB_JDBC_URL is the
//     jdbc:postgresql:// or jdbc:mariadb:// URL without credentials, which
//     Java plugins (LuckPerms, CoreProtect, …) take with DB_USER and
//     DB_PASSWORD. The values are read when the server starts (never
//     stored with the server, so the password stays sealed in one place);
//     a profile's own variable of the same name wins.
//   - Credentials returns the same values (as a deployment spec's
//     ${dbservices.NAME.…} references name them), read when asked, for
//     the executor to write into a server's files; their LogValue leaves
//     the password and the URL holding it out.
//   - DB_HOST and DB_PORT are the host's address as game servers reach it:
//     the DSN's host and port unless `dbhost add --address` says otherwise
//     (a docker-runtime server cannot reach a database at 127.0.0.1).
//   - Drivers: pgx v5 (already Kiln's PostgreSQL driver) and
//     github.com/go-sql-driver/mysql, the maintained MySQL/MariaDB driver
//     of database/sql (pure Go, what every Go MySQL user runs). A DSN is a
//     URL: postgres://user:password@host:port/db?sslmode=… or
//     mariadb://user:password@host:port/ (mysql:// is accepted too).
package dbservice
