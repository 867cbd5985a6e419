-- +goose Up
-- A team's server list changes version whenever a server is created or
-- deleted or a field shown in the list changes. Triggers keep it, so no
-- code path (and no other replica) can forget to; the list is then served
-- from memory while its version stands (servers.Service.List).
ALTER TABLE teams ADD COLUMN servers_version INTEGER NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE TRIGGER servers_list_insert AFTER INSERT ON servers BEGIN
    UPDATE teams SET servers_version = servers_version + 1 WHERE id = NEW.team_id;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER servers_list_delete AFTER DELETE ON servers BEGIN
    UPDATE teams SET servers_version = servers_version + 1 WHERE id = OLD.team_id;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER servers_list_update AFTER UPDATE OF team_id, name, software, status, node, port, configuration_id ON servers
WHEN OLD.team_id IS NOT NEW.team_id OR OLD.name IS NOT NEW.name OR OLD.software IS NOT NEW.software
  OR OLD.status IS NOT NEW.status OR OLD.node IS NOT NEW.node OR OLD.port IS NOT NEW.port
  OR OLD.configuration_id IS NOT NEW.configuration_id
BEGIN
    UPDATE teams SET servers_version = servers_version + 1 WHERE id IN (OLD.team_id, NEW.team_id);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER servers_list_update;
DROP TRIGGER servers_list_delete;
DROP TRIGGER servers_list_insert;
ALTER TABLE teams DROP COLUMN servers_version;
