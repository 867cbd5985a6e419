-- +goose Up
-- SFTP credentials (internal/sftp): one per (token, server), made the first
-- time a token asks for its credentials on a server. username is the
-- token's label; login is what one logs in with (username + "." + the first
-- 8 hex of the server's UUID). It is not unique (two tokens may share a
-- label, two servers an 8-hex prefix): a login tries the rows of that name,
-- and the row matched, never the name, says which server it opens. The
-- password is sealed by internal/secretbox (it is shown again on every get,
-- so it is kept decryptable, never in plain text). generation grows at each
-- rotation: a session logged in with an older one is cut. Rows go with their
-- server or token. Times are Unix ms.
CREATE TABLE sftp_credentials (
    id              TEXT PRIMARY KEY,
    team_id         TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    token_id        TEXT NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
    server_id       TEXT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    username        TEXT NOT NULL,
    login           TEXT NOT NULL,
    password_sealed TEXT NOT NULL,
    generation      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    rotated_at      BIGINT NOT NULL,
    UNIQUE (token_id, server_id)
);
CREATE INDEX sftp_credentials_login ON sftp_credentials(login);
CREATE INDEX sftp_credentials_server ON sftp_credentials(server_id);

-- +goose Down
DROP TABLE sftp_credentials;
