-- +goose Up
-- Every kiln serve process, owned by internal/instance: an id per start
-- (inst_…), the node it serves, where it runs, and seen_at, refreshed by a
-- heartbeat about every 10 s while it serves. Leases of the deployments
-- run queue name their owner by this id. A clean stop deletes its row; a
-- killed process's row is deleted by a later start once it has not been
-- seen for a day. Times are Unix ms.
CREATE TABLE instances (
    id         TEXT PRIMARY KEY, -- inst_…
    node_id    TEXT NOT NULL,
    hostname   TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
CREATE INDEX instances_node ON instances(node_id, seen_at);

-- +goose Down
DROP TABLE instances;
