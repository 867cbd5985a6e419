-- +goose Up
CREATE TABLE teams (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    kind       TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE, -- hex SHA-256 of the whole token
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
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
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX servers_team ON servers(team_id, created_at DESC);

-- Rate-limit state shared by every replica: one GCRA "theoretical arrival
-- time" per key, in microseconds of the database clock. UNLOGGED: losing it
-- in a crash only forgives some requests.
CREATE UNLOGGED TABLE rate_limits (
    key TEXT PRIMARY KEY,
    tat BIGINT NOT NULL
);

-- +goose Down
DROP TABLE rate_limits;
DROP TABLE servers;
DROP TABLE tokens;
DROP TABLE teams;
