// Package secrets keeps a team's secrets: named values its deployment
// specs reference as ${secrets.NAME} (a variable the software marks
// secret, a file's content), which a run reads when it applies the spec,
// so a password is never written into a spec, a version or a run.
//
// It owns the team_secrets table and nothing else. What it must never do:
// keep a value in plain text (each is sealed by internal/secretbox before
// it reaches the database), answer a value back through anything but
// Values (which only the executor calls), log one, or name it in an
// error; let a team see or touch another team's secret (another team's
// name is ErrNotFound, as a name nobody has).
//
// Decisions:
//   - A name is what an environment variable's can be: a letter or "_",
//     then letters, digits or "_", at most 64 (MaxName). A value is UTF-8
//     text without NUL, 1 byte to 16 KiB (MaxValue: a PEM key fits). A
//     team keeps at most MaxSecrets (200); the next Put is ErrTooMany.
//   - Put creates or replaces (the updated time moves, the created one
//     stays); the team's row is locked first on PostgreSQL, so two Puts
//     of a team are counted one after the other (SQLite has one writer).
//   - Delete of a secret a spec still references is allowed: the next run
//     of that spec fails at planning, naming it, before changing anything
//     (the executor reads the values when it plans); what a server was
//     given before stays with it.
package secrets
