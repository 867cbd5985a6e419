-- +goose Up
-- Restores and downloads reading a snapshot (internal/snapshot/reads.go).
-- While one is listed, a delete removes the snapshot's record but leaves
-- its manifest and chunks (storage_cleanup_reason in_use); the last
-- reader to end cleans them, or the collector once a reader's process is
-- gone. claim names the reader's instance, as chunks.claim does.
CREATE TABLE snapshot_reads (
    claim         TEXT PRIMARY KEY,
    snapshot_uuid TEXT NOT NULL,
    started_at    BIGINT NOT NULL
);
CREATE INDEX snapshot_reads_uuid ON snapshot_reads(snapshot_uuid);

-- +goose Down
DROP TABLE snapshot_reads;
