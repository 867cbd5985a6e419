// Package node describes one host that runs game servers: its name, its
// capacity (memory, disk), the game ports it hands out and where server
// roots live, and the runtime that starts servers there.
//
// Local is the only implementation today: the machine kiln serve runs on.
// The servers package reaches a node only through the small interface it
// declares, so that a remote implementation (an HTTP client of `kiln agent`
// on another host) can stand in later without changing the lifecycle code.
//
// It must never touch the database: which ports are taken is the servers
// table's business; a node only says which ports exist.
package node
