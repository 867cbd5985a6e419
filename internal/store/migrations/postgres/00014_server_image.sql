-- +goose Up
-- The docker image a server runs in, when its owner chose one of its
-- profile's images (a deployment spec's image); '' lets the profile pick
-- by the Java version the game needs. The process runtime ignores it.
ALTER TABLE servers ADD COLUMN image TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE servers DROP COLUMN image;
