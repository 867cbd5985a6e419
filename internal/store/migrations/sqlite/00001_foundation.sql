-- +goose Up
CREATE TABLE teams (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    kind       TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE, -- hex SHA-256 of the whole token
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX tokens_team ON tokens(team_id, created_at);

CREATE TABLE servers (
    id               TEXT PRIMARY KEY, -- UUID
    team_id          TEXT NOT NULL REFERENCES teams(id),
    name             TEXT NOT NULL,
    software         TEXT NOT NULL,
    version          TEXT NOT NULL,
    status           TEXT NOT NULL,
    node             TEXT NOT NULL,
    port             INTEGER NOT NULL,
    memory_mb        INTEGER NOT NULL,
    disk_mb          INTEGER NOT NULL,
    cpu_percent      INTEGER NOT NULL,
    configuration_id TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX servers_team ON servers(team_id, created_at DESC);

-- +goose Down
DROP TABLE servers;
DROP TABLE tokens;
DROP TABLE teams;
