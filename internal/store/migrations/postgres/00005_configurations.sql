-- +goose Up
-- Deployment configurations and their pushed versions (api.md §2,
-- deployment-spec.md), owned by internal/deploy. A configuration holds the
-- team's current YAML (checked by internal/deploy/spec) and its spec_hash;
-- a push freezes it as the next version, immutable. latest_version_id
-- points at the newest version (NULL before the first push). Times are
-- Unix ms.
CREATE TABLE configurations (
    id                TEXT PRIMARY KEY, -- cfg_…
    team_id           TEXT NOT NULL REFERENCES teams(id),
    name              TEXT NOT NULL,
    description       TEXT NOT NULL DEFAULT '',
    yaml              TEXT NOT NULL,
    spec_hash         TEXT NOT NULL,
    resource_count    INTEGER NOT NULL CHECK (resource_count >= 0),
    latest_version_id TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    UNIQUE (team_id, name)
);
CREATE INDEX configurations_team ON configurations(team_id, created_at DESC);

CREATE TABLE configuration_versions (
    id               TEXT PRIMARY KEY, -- ver_…
    configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
    version_number   INTEGER NOT NULL CHECK (version_number >= 1),
    yaml             TEXT NOT NULL,
    spec_hash        TEXT NOT NULL,
    resource_count   INTEGER NOT NULL CHECK (resource_count >= 0),
    pushed_by        TEXT NOT NULL, -- user:<label> or agent:<label>
    pushed_at        BIGINT NOT NULL,
    push_message     TEXT NOT NULL DEFAULT '',
    base_version_id  TEXT, -- the version this one was pushed on top of; NULL for the first
    -- Two pushes racing for the same number: one insert fails.
    UNIQUE (configuration_id, version_number)
);

-- +goose Down
DROP TABLE configuration_versions;
DROP TABLE configurations;
