-- +goose Up
-- Operator-set limits of a team, owned by internal/servers (kiln admin
-- team limits): how many servers it may have, and their total memory and
-- disk. A missing row or a NULL column is no limit. Times are Unix ms.
CREATE TABLE team_limits (
    team_id       TEXT PRIMARY KEY REFERENCES teams(id) ON DELETE CASCADE,
    max_servers   INTEGER,
    max_memory_mb INTEGER,
    max_disk_mb   INTEGER,
    updated_at    BIGINT NOT NULL
);

-- +goose Down
DROP TABLE team_limits;
