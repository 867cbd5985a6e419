-- +goose Up
-- A server a deployment run created carries its configuration and its
-- resource key (server/lobby, proxy/edge): the executor finds it again by
-- that pair, so a resumed step never creates it twice (the unique index
-- refuses a second one whatever races). Servers made by hand have neither.
ALTER TABLE servers ADD COLUMN resource_key TEXT;
CREATE UNIQUE INDEX servers_owned ON servers(configuration_id, resource_key) WHERE configuration_id IS NOT NULL;

-- What the last run applied to each resource key of a configuration (the
-- resource's canonical JSON from the spec): the planner's live state.
-- Owned by internal/deploy. object_id is the server (or, later, proxy or
-- database) it made. Times are Unix ms.
CREATE TABLE applied_resources (
    configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
    resource_key     TEXT NOT NULL,
    object_id        TEXT NOT NULL,
    applied          TEXT NOT NULL,
    run_id           TEXT,
    updated_at       BIGINT NOT NULL,
    PRIMARY KEY (configuration_id, resource_key)
);

-- +goose Down
DROP TABLE applied_resources;
DROP INDEX servers_owned;
ALTER TABLE servers DROP COLUMN resource_key;
