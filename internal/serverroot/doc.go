// Package serverroot is what an operation on a server's files is given
// and what it may be refused with: Access (the root, its disk ledger,
// Kiln's temporary names, a restore's hold) and the errors of a root that
// is missing (ErrNotFound), being installed (ErrInstalling), restored into
// (ErrRestoring) or read whole by a snapshot (ErrSnapshotting). It is the
// seam between the node-local packages, which kiln agent will run on a
// game host, and internal/servers, which keeps the records.
//
// What it must never do: import the database layer, the secret box, or
// any package that links them (internal/servers, internal/store), hold
// state, or know teams, records or HTTP. TestNodeLocalImportsNoDatabase
// checks, with go list -deps as internal/agent's test does, that neither
// it nor the node-local packages (gameserver, files, files/archive,
// snapshot's manifest, engine, restore and ignore, quota, blob, runtime
// and its docker, catalog/install, node, netguard, slp) link database/sql,
// internal/store, internal/secretbox, pgx, modernc.org/sqlite, goose or
// the MySQL driver, and that internal/servers does (so the check sees).
//
// Decisions:
//   - Why a package: internal/files imported internal/servers only for
//     Access and ErrRestoring, and that one import made files, archives
//     and the snapshot manifest, engine and restore link the SQL drivers,
//     goose, the secret box, the runtimes and the installers. Access is a
//     root and a ledger (internal/quota) and names no team; the errors
//     are values. Both moved here, and files, pull's transfers and sftp's
//     handlers name them here.
//   - The seam in servers: `type Access = serverroot.Access` and `var
//     ErrNotFound = serverroot.ErrNotFound` (and the three others) are
//     aliases, the same type and the same values, so *servers.Service
//     still satisfies files.Servers, pull.Servers and sftp.Servers
//     unchanged, and errors.Is matches whichever name a caller uses.
//     Callers that hold a *servers.Service anyway (internal/api's error
//     table, the deployments executor, modcatalog, snapshot) keep the
//     servers names; TestRootErrorsAnswer (internal/api) checks that
//     serverroot's errors get their answers through that table.
//   - Which errors: those a node answers of a root it holds. ErrNotFound
//     is what a node says of an id it does not hold, as the control plane
//     says it of a server of another team; the install runs on the node,
//     and a restore's hold and a snapshot's reading live in the memory of
//     the process that holds the root, so ErrInstalling, ErrRestoring and
//     ErrSnapshotting are the node's too. Not here: ErrOffline,
//     ErrTooManyStreams, ErrInstallFailed and ErrEULANotAccepted (a
//     process, its console and its start, not a root: they are
//     internal/gameserver's, the lifecycle of a node's servers), and
//     ErrOwned, OtherNodeError and TeamLimitError (records and placement,
//     the control plane's).
//   - database/sql/driver is allowed although it is under database/sql:
//     it declares the interfaces a value implements to be stored
//     (driver.Valuer) and links no driver, connection or SQL.
//     github.com/google/uuid and minio-go's github.com/rs/xid import it
//     for their Value methods, so whatever links the S3 client
//     (internal/blob: snapshot's engine and restore, catalog/install's
//     artifact cache) links it. internal/agent's test forbids it today;
//     the agent will link it once it reaches the blob store.
//   - Still mixed: pull and sftp keep their records in the database (the
//     downloads table, the SFTP credentials), so the packages link
//     internal/store although their node-local halves (transfer.go,
//     handlers.go) import only this package; modcatalog and snapshot read
//     servers' records through *servers.Service. Each is split when its
//     node-local half moves to the agent.
//   - The name: the root of one server, what every field and error is
//     about; not "root" (files.Root and os.Root are the opened
//     directory) and no name of the standard library.
package serverroot
