// Package deploy owns deployment configurations: a team's YAML network
// specs (checked by internal/deploy/spec), pushed as numbered immutable
// versions. The planner and the runs that apply a version (deployment-spec.md
// §3–§5) will live here too.
//
// It owns the configurations and configuration_versions tables and nothing
// else; it never reads a request, never touches a server's files or
// process, and scopes every query to the caller's team (another team's
// configuration is ErrNotFound, never a different error).
//
// Decisions where the contract is silent (api.md §2 sets name 1–100
// characters, unique in the team, and push_message at most 1000):
//   - description: at most 1000 characters; name and push message one
//     line, description may span lines; no other control characters.
//   - A broken spec's issues keep the spec's paths ("servers.lobby.memory",
//     as api.md §0 shows); one about the whole spec (a YAML syntax error,
//     too many resources) is at "yaml". The request's own fields are at
//     "name", "description" and "push_message".
//   - The YAML is stored as written (comments included); its spec_hash is
//     that of the normalized spec, so a push after an edit that changes only
//     comments or layout returns the latest version with created false.
//   - Pushes of one configuration are serialized (SQLite: its single
//     writer; PostgreSQL: SELECT … FOR UPDATE on the configuration), and
//     the unique (configuration_id, version_number) index refuses a
//     duplicate number whatever happens.
//   - Version pages: newest first, limit 1–200 (default 50), cursor
//     "v<number>" (opaque to clients: use next_cursor as given; "" ends).
//   - Diff: a unified diff (github.com/aymanbagabas/go-udiff, the Go
//     team's internal/diff of golang.org/x/tools exported: Myers, 3 lines
//     of context) of two versions' YAML; "to" defaults to the latest,
//     "from" to the one before (nothing before the first); the text is cut
//     after 256 KiB at a line end, the line counts are of the whole diff.
//     Before any push it is ErrNotPushed (409 NOT_PUSHED).
//   - A proxy's requested port must be within the node's game ports
//     (New's range, kiln serve's --port-range): an issue at
//     proxies.<name>.port at create and update, where the spec is checked,
//     and again at push (and apply's push), since the range may have
//     changed since the YAML was set. Without it the version passed and
//     only its run failed. Two proxies of one spec asking for the same
//     port are refused there too (the second by name). Not in
//     internal/deploy/spec, which knows no node.
//   - Apply (apply.go) is the push and the run's enqueue in one
//     transaction (runs.Queue.EnqueueTx in the push's): a crash or a
//     failure between them cannot leave a pushed version that no run
//     applies (the next apply would find nothing to push) nor a run
//     without its version. A replay of the idempotency key is answered
//     before anything is written; one that races this call makes the
//     key's insert fail, which rolls the push back too, and the key's run
//     is answered. The package imports internal/deploy/runs for it, which
//     writes its own tables; deploy writes only its two.
//   - Check reads an unsaved YAML as Update would (the same issues at the
//     same paths), for a plan of an edit; it writes nothing.
//   - A secret variable (RCON_PASSWORD) written literally in a spec is
//     refused when the spec is saved or planned as an edit
//     (spec.LiteralSecrets, an issue at it pointing to team secrets); a
//     configuration saved before the rule is not refused at push or
//     apply (nothing parses it again there), so existing networks keep
//     applying, and its next edit must move the value into a secret.
//   - Delete removes the versions with the configuration; it is refused
//     (ErrInUse) while a server created by its runs still exists.
//   - Applied state (applied.go, table applied_resources): per resource key,
//     the object a run made and the resource's canonical JSON it applied.
//     It is the planner's live state (Live → plan.Make): a run records a
//     key when its step succeeds (again on a resumed step: it replaces) and
//     forgets it when it deletes the object. The queue of runs is
//     internal/deploy/runs; the executor that joins them comes next.
package deploy
