-- +goose Up
-- A team's secrets (internal/secrets): named values its deployment specs
-- reference as ${secrets.NAME}, sealed by internal/secretbox (never in
-- plain text) and never answered back. Times are Unix ms.
CREATE TABLE team_secrets (
    team_id    TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    sealed     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (team_id, name)
);

-- +goose Down
DROP TABLE team_secrets;
