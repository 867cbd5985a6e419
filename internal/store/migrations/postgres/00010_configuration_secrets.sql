-- +goose Up
-- Secrets a configuration's runs generate once and reuse (the proxies'
-- modern forwarding secret), sealed by internal/secretbox: never in plain
-- text. Owned by internal/deploy. Times are Unix ms.
CREATE TABLE configuration_secrets (
    configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    sealed           TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    PRIMARY KEY (configuration_id, name)
);

-- +goose Down
DROP TABLE configuration_secrets;
