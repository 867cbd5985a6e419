// Package plan is the planner of deployment-spec.md §3: it compares a
// pushed version's spec with what the configuration's runs made and gives
// every resource key one action (create, update, replace, delete, noop),
// in the order a run executes them, grouped in tiers of independent steps.
//
// It is a pure function of its inputs: no database, no clock, no I/O. A
// run stores the plan as its resources (pending) before executing any of
// it, and the plan's Hash in its checkpoint.
//
// What "live" means: each object a run created carries its configuration
// and key, and the run records what it applied (the resource's canonical
// JSON from the spec). The planner compares that applied state with the
// desired one, field by field; it never inspects the running object
// (a restart or a hand-made change of memory is not a spec change).
// Decisions where §3 is silent:
//   - Comparison is of RFC 8785 canonical JSON (github.com/gowebpki/jcs),
//     so key order and number spelling in a stored state change nothing.
//   - Replace wins over update when software (server, proxy) or engine
//     (dbservice) changed along with other fields.
//   - References: a server's or proxy's desired state carries
//     "references", a digest of the values its files' references resolve
//     to (the executor computes it; Make takes the digests by key), never
//     the values; a value that changes changes the digest, and the
//     resource is updated ("references" in Changes). Left out without
//     references, so states applied before keep their JSON.
//   - Order: creations, replacements and updates first — dbservices, then
//     servers, then proxies (a proxy's backends exist before it is
//     configured with them) — then deletions — proxies, then servers, then
//     dbservices (nothing is deleted while something still points at it).
//     Within a tier, steps are sorted by name. Noops are reported, in no
//     tier.
//     A server whose files reference another server's address runs in a
//     tier after that server's (one more than the highest it references).
package plan
