// Package servers owns game-server records: who owns them, their limits,
// their state, and the queries over them.
//
// Today it lists and counts a team's servers; the lifecycle (install, power,
// console, live resources) arrives with the servers issue and builds on the
// same table. Live resource figures come from a background sampler so that a
// list never waits on a runtime; until a runtime exists there is no server to
// sample, and List reports zeros for servers it has no sample of.
//
// Every query is scoped by team id: a server of another team is simply not
// found (ErrNotFound), never "forbidden". It knows nothing of HTTP.
package servers
