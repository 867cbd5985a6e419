-- +goose Up
-- The servers issue: what the lifecycle keeps per server. desired_state is
-- what the user asked for (restored after a restart of kiln serve);
-- runtime_ref names the live instance (pid:starttime or container id) so
-- the next start can re-adopt or end it; install_error says why the last
-- install failed (NULL when it did not); java_major, jar and args_file are
-- what the last install resolved and starting needs.
ALTER TABLE servers ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
ALTER TABLE servers ADD COLUMN desired_state TEXT NOT NULL DEFAULT 'stopped'
    CHECK (desired_state IN ('running', 'stopped'));
ALTER TABLE servers ADD COLUMN runtime_ref TEXT;
ALTER TABLE servers ADD COLUMN install_error TEXT;
ALTER TABLE servers ADD COLUMN java_major INTEGER NOT NULL DEFAULT 0;
ALTER TABLE servers ADD COLUMN jar TEXT NOT NULL DEFAULT '';
ALTER TABLE servers ADD COLUMN args_file TEXT NOT NULL DEFAULT '';
-- One game port per node: two replicas picking the same free port cannot
-- both insert.
CREATE UNIQUE INDEX servers_node_port ON servers(node, port);

-- +goose Down
DROP INDEX servers_node_port;
ALTER TABLE servers DROP COLUMN args_file;
ALTER TABLE servers DROP COLUMN jar;
ALTER TABLE servers DROP COLUMN java_major;
ALTER TABLE servers DROP COLUMN install_error;
ALTER TABLE servers DROP COLUMN runtime_ref;
ALTER TABLE servers DROP COLUMN desired_state;
ALTER TABLE servers DROP COLUMN env;
