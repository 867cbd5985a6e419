-- +goose Up
-- The deployments run queue (deployment-spec.md §5, api.md §2), owned by
-- internal/deploy/runs; its doc.go says why each choice. Times are Unix ms;
-- JSON columns hold text (checkpoint, summary, desired/before/after, log,
-- data), NULL when there is nothing yet.
--
-- seq is the queue order: it only grows, so runs enqueued in the same
-- millisecond keep their order. SQLite: the rowid (AUTOINCREMENT, never
-- reused); PostgreSQL: an identity column.
CREATE TABLE runs (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE, -- run_…
    team_id          TEXT NOT NULL REFERENCES teams(id),
    -- A configuration's runs go with it (deploy.Delete removes its
    -- versions, then it); the API refuses that delete while a run is open.
    configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
    version_id       TEXT NOT NULL REFERENCES configuration_versions(id) ON DELETE CASCADE,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'planning', 'executing', 'finalizing', 'succeeded', 'failed', 'canceled')),
    stage            TEXT CHECK (stage IN ('planning', 'executing', 'finalizing')),
    idempotency_key  TEXT,
    created_by       TEXT NOT NULL, -- user:<label> or agent:<label>
    lease_owner      TEXT,    -- instance id (inst_…) that holds or last held the run
    lease_until      INTEGER, -- the lease is live while now < lease_until; NULL once final
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    checkpoint       TEXT, -- {"done": [keys], "plan_hash": "…"}
    summary          TEXT, -- {create, update, replace, delete, noop, succeeded, failed}
    error            TEXT,
    failure_class    TEXT CHECK (failure_class IN ('validation', 'capacity', 'install', 'runtime', 'health_timeout', 'dependency', 'canceled', 'internal')),
    created_at       INTEGER NOT NULL,
    started_at       INTEGER,
    completed_at     INTEGER,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX runs_team ON runs(team_id, seq);
CREATE INDEX runs_configuration ON runs(configuration_id, seq);
CREATE INDEX runs_version ON runs(version_id);
-- What Claim scans: the runs not final.
CREATE INDEX runs_open ON runs(seq) WHERE status IN ('queued', 'planning', 'executing', 'finalizing');
-- One run executes at a time per configuration: a second started run of a
-- configuration is refused by the index, whatever the queries do.
CREATE UNIQUE INDEX runs_one_started ON runs(configuration_id) WHERE status IN ('planning', 'executing', 'finalizing');

-- Idempotency keys of apply, unique per team while younger than 24 h. A
-- row older than that counts as absent: the insert that reuses the key
-- deletes it first, in the same transaction, and Prune removes the rest.
CREATE TABLE run_idempotency_keys (
    team_id          TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    idempotency_key  TEXT NOT NULL,
    configuration_id TEXT NOT NULL,
    run_id           TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (team_id, idempotency_key)
);
CREATE INDEX run_idempotency_keys_age ON run_idempotency_keys(created_at);
CREATE INDEX run_idempotency_keys_run ON run_idempotency_keys(run_id);

-- A run's plan, one row per resource key, stored pending before anything
-- executes; position is the plan's order.
CREATE TABLE run_resources (
    run_id        TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    resource_key  TEXT NOT NULL, -- <kind>/<name>
    position      INTEGER NOT NULL,
    resource_type TEXT NOT NULL CHECK (resource_type IN ('dbservice', 'server', 'proxy')),
    action        TEXT NOT NULL CHECK (action IN ('create', 'update', 'replace', 'delete', 'noop')),
    status        TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped')),
    attempt       INTEGER NOT NULL DEFAULT 0,
    desired       TEXT,
    before_state  TEXT,
    after_state   TEXT,
    log           TEXT NOT NULL DEFAULT '[]', -- JSON list of lines
    error         TEXT,
    started_at    INTEGER,
    completed_at  INTEGER,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (run_id, resource_key)
);

-- What happened to a run, oldest first (seq counts from 1 per run).
CREATE TABLE run_events (
    run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    stage      TEXT,
    message    TEXT NOT NULL DEFAULT '',
    data       TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE run_events;
DROP TABLE run_resources;
DROP TABLE run_idempotency_keys;
DROP TABLE runs;
