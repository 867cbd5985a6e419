-- +goose Up
-- A team's server list changes version whenever a server is created or
-- deleted or a field shown in the list changes. Triggers keep it, so no
-- code path (and no other replica) can forget to; the list is then served
-- from memory while its version stands (servers.Service.List).
ALTER TABLE teams ADD COLUMN servers_version BIGINT NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE FUNCTION servers_list_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE teams SET servers_version = servers_version + 1 WHERE id = NEW.team_id;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE teams SET servers_version = servers_version + 1 WHERE id = OLD.team_id;
    ELSE
        UPDATE teams SET servers_version = servers_version + 1 WHERE id IN (OLD.team_id, NEW.team_id);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER servers_list_insert AFTER INSERT ON servers FOR EACH ROW EXECUTE FUNCTION servers_list_bump();
CREATE TRIGGER servers_list_delete AFTER DELETE ON servers FOR EACH ROW EXECUTE FUNCTION servers_list_bump();
CREATE TRIGGER servers_list_update AFTER UPDATE OF team_id, name, software, status, node, port, configuration_id ON servers
    FOR EACH ROW WHEN (OLD.team_id IS DISTINCT FROM NEW.team_id OR OLD.name IS DISTINCT FROM NEW.name
        OR OLD.software IS DISTINCT FROM NEW.software OR OLD.status IS DISTINCT FROM NEW.status
        OR OLD.node IS DISTINCT FROM NEW.node OR OLD.port IS DISTINCT FROM NEW.port
        OR OLD.configuration_id IS DISTINCT FROM NEW.configuration_id)
    EXECUTE FUNCTION servers_list_bump();

-- +goose Down
DROP TRIGGER servers_list_update ON servers;
DROP TRIGGER servers_list_delete ON servers;
DROP TRIGGER servers_list_insert ON servers;
DROP FUNCTION servers_list_bump();
ALTER TABLE teams DROP COLUMN servers_version;
