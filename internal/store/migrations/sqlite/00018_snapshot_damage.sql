-- +goose Up
-- A ready snapshot found damaged (internal/snapshot/integrity.go): its
-- manifest missing or corrupt, or chunks it references missing or found
-- corrupt (and moved to quarantine/), by a restore, a download or kiln
-- admin snapshots check. damage is the sentence the API shows, damaged_at
-- when it was found (Unix ms); both NULL for a snapshot not known to be
-- damaged, and set back to NULL once a check or a whole restore or
-- download finds it whole again (a later snapshot stored the chunks it
-- missed).
ALTER TABLE snapshots ADD COLUMN damage TEXT;
ALTER TABLE snapshots ADD COLUMN damaged_at BIGINT;

-- +goose Down
ALTER TABLE snapshots DROP COLUMN damaged_at;
ALTER TABLE snapshots DROP COLUMN damage;
