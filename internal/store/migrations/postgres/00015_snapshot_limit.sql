-- +goose Up
-- How many snapshots a team may keep (kiln admin team limits --snapshots):
-- pending, creating and ready ones count, failed ones (which hold no
-- storage) do not. NULL is no limit, as the other columns.
ALTER TABLE team_limits ADD COLUMN max_snapshots INTEGER;

-- +goose Down
ALTER TABLE team_limits DROP COLUMN max_snapshots;
