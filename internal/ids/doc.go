// Package ids makes the opaque, prefixed identifiers of Kiln's records
// ("team_…", "tok_…", later "cfg_…", "run_…"): a readable prefix and 20
// characters of crypto/rand base62, so an id says what it names and cannot be
// guessed. Server ids are UUIDs and do not come from here.
package ids
