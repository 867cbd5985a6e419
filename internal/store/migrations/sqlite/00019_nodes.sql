-- +goose Up
-- The cluster's certificate authority (internal/nodes): one row, made by
-- the first start of kiln serve. cert_pem is public (its SHA-256 is in
-- every join token); key_sealed is its private key (PKCS #8) sealed by
-- internal/secretbox under the control plane's secret key: only the
-- control plane opens it, and no agent ever holds it.
CREATE TABLE cluster_ca (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    cert_pem   TEXT NOT NULL,
    key_sealed TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- The nodes of the cluster (internal/nodes): the local node of each kiln
-- serve (kind local, by --node-name) and the agents (kind agent). An agent
-- is added with a join token, of which only the digest of its secret is
-- kept (join_digest, until join_expires_at); join_key is the SHA-256 of
-- the public key that enrolled with it (the same key may fetch its
-- certificate again, any other is refused: the token is used).
-- cert_serial is the node's current certificate: a call with any other
-- certificate of the node is refused, and removing the row revokes it.
-- NULL: added, not enrolled yet. heartbeat_at is the last report;
-- reachable_until = heartbeat_at + the silence after which the control
-- plane that took the report calls the node unreachable. The sizes are
-- bytes as the node reported them; ports_busy the JSON list of the ports
-- of its range something listens on. Times are Unix ms.
CREATE TABLE nodes (
    name            TEXT PRIMARY KEY,
    kind            TEXT NOT NULL CHECK (kind IN ('local', 'agent')),
    join_digest     TEXT,
    join_expires_at INTEGER,
    join_key        TEXT,
    cert_serial     TEXT,
    cert_expires_at INTEGER,
    drained_at      INTEGER,
    address         TEXT NOT NULL DEFAULT '',
    public_host     TEXT NOT NULL DEFAULT '',
    sftp_addr       TEXT NOT NULL DEFAULT '',
    port_first      INTEGER NOT NULL DEFAULT 0,
    port_last       INTEGER NOT NULL DEFAULT 0,
    runtime         TEXT NOT NULL DEFAULT '',
    version         TEXT NOT NULL DEFAULT '',
    memory_total    INTEGER NOT NULL DEFAULT 0,
    memory_free     INTEGER NOT NULL DEFAULT 0,
    disk_total      INTEGER NOT NULL DEFAULT 0,
    disk_free       INTEGER NOT NULL DEFAULT 0,
    ports_busy      TEXT NOT NULL DEFAULT '[]',
    heartbeat_at    INTEGER,
    reachable_until INTEGER,
    created_at      INTEGER NOT NULL,
    enrolled_at     INTEGER
);

-- +goose Down
DROP TABLE nodes;
DROP TABLE cluster_ca;
