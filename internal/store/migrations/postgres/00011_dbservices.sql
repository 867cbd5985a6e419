-- +goose Up
-- Database hosts an operator registered (`kiln admin dbhost add`) and the
-- databases deployment runs made on them (dbservices). Owned by
-- internal/dbservice. The DSN (it holds the host's admin password) and each
-- database user's password are sealed by internal/secretbox: never in plain
-- text. address is host:port as game servers reach the host (no secret), for
-- DB_HOST/DB_PORT and `dbhost list`. Times are Unix ms.
CREATE TABLE db_hosts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    engine     TEXT NOT NULL,
    address    TEXT NOT NULL,
    dsn_sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- One row per dbservice a configuration owns, made before anything is
-- created on the host (so a crashed step finds its names and password
-- again): db_name and db_user are derived from the id, attach is the JSON
-- list of the configuration's servers that get its credentials.
CREATE TABLE db_services (
    id               TEXT PRIMARY KEY,
    team_id          TEXT NOT NULL REFERENCES teams(id),
    configuration_id TEXT NOT NULL REFERENCES configurations(id),
    resource_key     TEXT NOT NULL,
    host_id          TEXT NOT NULL REFERENCES db_hosts(id),
    engine           TEXT NOT NULL,
    db_name          TEXT NOT NULL,
    db_user          TEXT NOT NULL,
    password_sealed  TEXT NOT NULL,
    attach           TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    UNIQUE (configuration_id, resource_key)
);
CREATE INDEX db_services_host ON db_services(host_id);

-- +goose Down
DROP TABLE db_services;
DROP TABLE db_hosts;
