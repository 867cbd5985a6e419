-- +goose Up
-- Snapshots of servers (internal/snapshot). A record is written before
-- anything is stored; its chunks are pinned (snapshot_chunks) before each
-- is looked up or uploaded, so no collector removes a chunk a snapshot in
-- progress relies on. Times are Unix ms.
CREATE TABLE snapshots (
    id               TEXT PRIMARY KEY,          -- snap_…
    uuid             TEXT NOT NULL UNIQUE,      -- storage identity: manifests/<uuid>
    team_id          TEXT NOT NULL REFERENCES teams(id),
    source_server_id TEXT NOT NULL,             -- kept when the server goes
    name             TEXT NOT NULL,
    ignore           TEXT NOT NULL,
    status           TEXT NOT NULL,             -- pending, creating, ready, failed
    error            TEXT,
    owner            TEXT,                      -- instance taking it (pending/creating)
    bytes_done       BIGINT NOT NULL DEFAULT 0,
    bytes_total      BIGINT NOT NULL DEFAULT 0,
    size_bytes       BIGINT,
    stored_bytes     BIGINT,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    completed_at     BIGINT,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX snapshots_team ON snapshots(team_id, created_at DESC);
CREATE INDEX snapshots_status ON snapshots(status);

-- Every chunk Kiln stored, by blob key, and its state: live (kept; the
-- collector reaps one no snapshot references) or deleting (its blob is
-- being removed: a snapshot that
-- needs it waits until the row is gone, then uploads it again). claim is
-- the token of the reaper deleting it: only that reaper removes the row,
-- and another takes a deleting row over only once it is stale (a crash).
-- stored_size is its compressed size in the store.
CREATE TABLE chunks (
    key          TEXT PRIMARY KEY,
    state        TEXT NOT NULL,
    stored_size  BIGINT NOT NULL DEFAULT 0,
    claim        TEXT,
    updated_at   BIGINT NOT NULL
);

-- Which chunks each snapshot (ready, or in progress: a pin) references.
CREATE TABLE snapshot_chunks (
    snapshot_uuid TEXT NOT NULL,
    chunk         TEXT NOT NULL REFERENCES chunks(key),
    PRIMARY KEY (snapshot_uuid, chunk)
);
CREATE INDEX snapshot_chunks_chunk ON snapshot_chunks(chunk);

-- +goose Down
DROP TABLE snapshot_chunks;
DROP TABLE chunks;
DROP TABLE snapshots;
