-- +goose Up
-- Remote downloads (POST /files/pull, api.md §4), owned by internal/pull.
-- Every state change is written here before it is acknowledged, so a
-- restart of kiln serve finds what was in flight and marks it failed.
-- size is the Content-Length (0 until known; the bytes written once done),
-- written the bytes received so far (flushed about once a second while
-- running), error the reason a download failed (NULL otherwise),
-- finished_at when it left queued/running (NULL before). Times are Unix ms.
CREATE TABLE downloads (
    id          TEXT PRIMARY KEY, -- dl_…
    team_id     TEXT NOT NULL REFERENCES teams(id),
    server_id   TEXT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    directory   TEXT NOT NULL, -- as the user sees it: "/plugins"
    filename    TEXT NOT NULL, -- a plain name
    status      TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'done', 'failed', 'canceled')),
    size        INTEGER NOT NULL DEFAULT 0 CHECK (size >= 0),
    written     INTEGER NOT NULL DEFAULT 0 CHECK (written >= 0),
    error       TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER,
    CHECK ((status = 'failed') = (error IS NOT NULL)),
    CHECK ((status IN ('queued', 'running')) = (finished_at IS NULL))
);
-- Listing a server's downloads, newest first.
CREATE INDEX downloads_server ON downloads(server_id, created_at DESC);
-- Counting a server's active downloads (at most 3) and finding them all
-- at start-up.
CREATE INDEX downloads_active ON downloads(server_id) WHERE status IN ('queued', 'running');
-- Pruning old finished rows.
CREATE INDEX downloads_finished ON downloads(finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP TABLE downloads;
