// Package testserver is a fake Minecraft Java server for demos and tests,
// run as `kiln testserver`: the real game cannot be downloaded offline,
// and the platform only needs what it watches of a server. It owns that
// imitation: vanilla-format log lines on stdout, a world directory with a
// level.dat, Server List Ping on the game port (through slp), and the
// console commands stop, say, list, save-all, save-off, save-on and help
// on stdin. With Options.Proxy (`kiln testserver --proxy`, profile
// kiln-test-proxy) it plays a Velocity proxy instead (proxy.go), so tests
// can prove a proxy's wiring end to end without downloading Velocity.
//
// It must never reach the network beyond its own listener and, as a
// proxy, the backend addresses of its velocity.toml; never touch a file
// outside its server root (every path goes through os.Root, so even a
// hostile level-name or forwarding-secret-file stays inside); never write
// server.properties (the platform owns it) nor an existing velocity.toml;
// and never spin: idle, it is blocked in Accept, in a stdin Read and in
// one select.
//
// Decisions:
//   - Precedence is Options, then server.properties (server-port, server-ip,
//     motd, max-players, level-name), then vanilla's defaults. Port 0 with
//     no server-port (or server-port=0) takes any free port, reported on
//     the "Starting Minecraft server on HOST:PORT" line, so tests need no
//     fixed port. An empty Host listens on every interface, as a container
//     needs, and is logged as "*" like vanilla.
//   - The port is bound before the simulated boot (a conflict fails early
//     with vanilla's FAILED TO BIND lines) but served only after it, and
//     "Done (N.NNNs)!" is logged once Serve runs: a ping before Done waits
//     in the accept queue, as it would behind vanilla's server thread, and
//     a ping after Done is answered.
//   - `stop` and ctx cancellation (SIGTERM, SIGINT, docker stop) end the
//     same way: stop lines, listener closed, world saved, nil. EOF on stdin
//     does not stop the server; a detached console (docker without -i,
//     stdin from /dev/null) must not.
//   - Command replies use vanilla's texts, including its second replies
//     ("Saving is already turned off") and the two-line unknown-command
//     error. There is no autosave, so save-off only flips the flag; only
//     save-all and stopping write the world.
//   - level.dat is real gzip-compressed NBT (LevelName, LastPlayed,
//     version), rewritten through a temporary file on every save, so tools
//     that read it find a level name and backups never see half a file.
//   - As a proxy it reads velocity.toml once, at start, as Velocity does:
//     bind (Options.Port and Options.Host win, as Velocity's --port),
//     show-max-players, player-info-forwarding-mode and [servers] with
//     try. A missing file is written first with Velocity's defaults that
//     matter (bind 0.0.0.0:25577, no servers, empty try), as Velocity
//     writes its own on the first start, so Kiln's wiring has a file to
//     edit. Like Velocity it refuses a try name that is not a server;
//     stricter than Velocity, which generates a missing secret, modern
//     and bungeeguard forwarding need a non-empty secret file, since Kiln
//     always writes one and a test should see a wiring that did not.
//   - A ping of the proxy pings the try list in order (slp.Ping, one
//     short deadline for them all: backendPingTimeout) and answers with
//     the first backend's version, players and MOTD, as Velocity's ping
//     passthrough (a MOTD of one text component keeps its § codes; a
//     richer one arrives as plain text); with none answering,
//     NoBackendMOTD. It logs in Velocity's format ("[15:04:05 INFO]: …"),
//     and `end`, `shutdown` and `stop` stop it.
//   - Logs are written from Run's goroutine only, so stdout needs no lock.
//     The stdin reader is the one goroutine Run cannot stop (a Read on an
//     io.Reader cannot be interrupted); it sends nothing after Run returns
//     and ends at stdin's next line or EOF. In the kiln process Run's
//     return ends the process.
package testserver
