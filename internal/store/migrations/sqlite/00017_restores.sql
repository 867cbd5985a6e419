-- +goose Up
-- Restores of snapshots, one row each (internal/snapshot/restores.go): a
-- client follows one by its id (GET /restores/{id}) as it goes from
-- pending (accepted, the server held) to restoring (its files being
-- written) to done or failed (error: one sentence). owner is the
-- instance running it, as snapshots.owner: a row left pending or
-- restoring by a process that is gone is ended by the next collector
-- pass. server_id is the target; no foreign key, like the snapshot's: the
-- record outlives neither its server's listing nor the snapshot's, but
-- is read only through the team.
CREATE TABLE restores (
    id           TEXT PRIMARY KEY,          -- rst_…
    team_id      TEXT NOT NULL REFERENCES teams(id),
    snapshot_id  TEXT NOT NULL,
    server_id    TEXT NOT NULL,
    path         TEXT,                      -- one path of the snapshot; NULL: all of it
    status       TEXT NOT NULL,             -- pending, restoring, done, failed
    error        TEXT,
    owner        TEXT,                      -- instance running it (pending/restoring)
    bytes_done   BIGINT NOT NULL DEFAULT 0,
    bytes_total  BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    started_at   BIGINT,
    completed_at BIGINT
);
CREATE INDEX restores_team ON restores(team_id, created_at DESC);
CREATE INDEX restores_server ON restores(server_id, created_at DESC);
CREATE INDEX restores_status ON restores(status);

-- +goose Down
DROP TABLE restores;
