-- +goose Up
-- A node's certificate being renewed (internal/nodes): the control plane
-- signed a new certificate for the node's new key, and the node may not
-- hold it yet. Both serials are accepted until a call comes with the new
-- one: then cert_serial (and cert_expires_at) take the pending values and
-- these go back to NULL, and the older certificate is refused. A renewal
-- whose answer was lost is replaced by the next; the current certificate
-- stays accepted throughout, so a kill of either side at any moment
-- leaves the node a certificate the row accepts. Times are Unix ms.
ALTER TABLE nodes ADD COLUMN cert_next_serial TEXT;
ALTER TABLE nodes ADD COLUMN cert_next_expires_at BIGINT;

-- +goose Down
ALTER TABLE nodes DROP COLUMN cert_next_expires_at;
ALTER TABLE nodes DROP COLUMN cert_next_serial;
