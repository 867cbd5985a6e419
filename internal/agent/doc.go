// Package agent is kiln agent: a game host of a Kiln cluster, the node
// side of the protocol of internal/cluster. It joins once with a join
// token, keeps its identity in its data dir, and holds a session with the
// control plane: it reports what the host has and reconnects with backoff
// when the session ends.
//
// Once its first session is welcomed it also holds the channel
// (channel.go, internal/cluster's doc): a second connection it dials, on
// which it serves the control plane's calls over HTTP/2 with
// Config.Handler, redialed with backoff apart from the session, until
// Run ends. It serves the channel only to a control plane its pinned CA
// vouches for (cluster.NodeChannelTLS).
//
// Its game servers: with Config.Host, the agent makes the node's
// gameserver.Host (kiln agent builds it as kiln serve builds its local
// node's: runtime, catalog, installers), whose records are the control
// plane's (noderpc.RecordsClient over this node's client, so a renewal's
// new certificate is used at once), serves its operations on the channel
// (noderpc.HostHandler; 503 until the Host has recovered) and runs it once
// the control plane answers for the node's servers — recovery needs them.
// Files, SFTP and snapshots of its servers come next.
//
// Its data dir: ca.pem (the cluster CA, pinned at enrollment), node.key
// (its private key, made here and never sent: the control plane gets a
// certificate request), node.pem (its certificate; written last, so its
// presence means enrolled), all 0600, and agent.lock (one agent per data
// dir). The key is written before the request is sent: an agent killed
// before it stored the certificate asks again with the same key and the
// same token, and the control plane answers that key again.
//
// Renewal (renew.go): when less than a third of its certificate's life
// is left (checked at the first welcome and every Config.RenewCheck),
// the agent makes a new key, writes it to node.key.next, has the control
// plane sign it over mutual TLS with the current certificate, writes the
// answer to node.pem.next, then renames the key and the certificate over
// node.key and node.pem, and reconnects with them. Each file is written
// whole and synced before the next step; at every start a complete new
// pair left by a kill is promoted, half a rename finished, and a new key
// without its certificate removed (promoteNext). The control plane
// accepts the current and the renewed certificate until it sees the
// renewed one, so whichever pair a kill leaves is accepted.
//
// The blob store (blobs.go): every node shares the control plane's
// (Config.Blobs, kiln agent --blob-url). The Welcome names the marker
// the control plane wrote into its store; at its first welcome (its join,
// or each start) the agent reads it through its own store and, when it
// is missing, holds other bytes or cannot be read, stops with
// *BlobStoreError — a sentence naming the store as blob.Store.String
// gives it, no credentials — before it opens the channel or renews
// anything. A later welcome naming another marker is checked again.
// It links internal/blob, whose S3 client brings database/sql/driver
// (interfaces only; the import test allows that one package).
//
// What it must never do: import the database layer or the secret key's
// box (TestAgentImportsNoDatabase over go list -deps), send the join
// token to a control plane whose CA is not the token's (the check is in
// the TLS handshake: cluster.EnrollTLS), or trust any other CA once one
// is pinned. A control plane's refusal of the node (removed, a used or
// expired token) ends Run with its sentence instead of retrying forever.
package agent
