// Package catalog owns the software profiles: what Kiln can install and run
// (Paper, Purpur, Folia, Vanilla, Fabric, Quilt, Forge, NeoForge, Velocity,
// Waterfall, BungeeCord, a custom jar by URL, and in development mode the
// bundled kiln-test server and kiln-test-proxy), and how to start, stop
// and place plugins
// for each. The installers that fetch the artifacts live in the
// subpackage install.
//
// A profile is data, one YAML file per software in profiles/, embedded in
// the binary. Besides the seed SoftwareProfile fields (id, name, type,
// description, docker_images, environment_variables) a file says:
//   - category: server or proxy;
//   - installer: which upstream installs it (kind, and project for Fill);
//   - version_var: the variable naming the version when the server's own
//     version field is empty;
//   - java: how the Java major version follows from the game version
//     (minecraft: the table of network.md §6; fixed: one version; none);
//   - include: shared parts in profiles/include/<name>.yaml, whose
//     environment variables are appended to the profile's own and whose
//     jvm_flags set (one at most) the element ${JVM_FLAGS} of the start
//     templates expands to: minecraft-server (EULA and the
//     server.properties variables of every game server) and aikar-flags
//     (Aikar's flags, their ≥ 12 GiB variant, and USE_AIKAR_FLAGS);
//   - start: the start command as an argv template with ${VAR}
//     placeholders; start_args_file the variant for installs that leave
//     a JVM args file instead of a jar (Forge 1.17+); large_heap element
//     swaps for big heaps;
//   - stop_command: the console line that stops it; port: its default port;
//     plugin_dir: plugins, mods or empty; listen: where the software reads
//     its listen address, which Kiln writes before every start
//     (properties: server.properties server-ip and server-port, plus the
//     keys of the environment variables with a property; velocity:
//     velocity.toml bind; bungeecord: config.yml listeners[0].host).
//
// Result (result.go) is what an install produced and starting needs: the
// package install returns it, Result.Vars feeds Command and
// Result.JavaMajor feeds Image.
//
// Placeholders are either platform variables (SERVER_MEMORY in MiB,
// SERVER_PORT, SERVER_JAR, SERVER_ARGS_FILE, JAVA, KILN_BIN), which the
// caller supplies, or the profile's own environment variables, which fall
// back to their defaults. Load validates every file (unique ids and types,
// type = file name, required fields, known installer, every placeholder
// resolvable, no unknown YAML keys) so a broken profile fails the tests,
// never a server start.
//
// It never downloads, runs or writes anything, and knows nothing of HTTP.
//
// Decisions:
//   - Profiles are files, not Go literals: reviewed as data, shaped like the
//     API answer, and one file per software keeps diffs small. Their JSON
//     form is the seed shape plus the extra fields, which the seed schema
//     allows (additionalProperties).
//   - Ids are fixed in the files and never reused: 1 paper, 2 purpur,
//     3 folia, 4 vanilla, 5 fabric, 6 forge, 7 neoforge, 8 velocity,
//     9 waterfall, 10 bungeecord, 11 quilt, 12 custom, 100 kiln-test,
//     101 kiln-test-proxy.
//   - custom: the user's jar (JAR_URL, https) must match JAR_SHA256,
//     which is required: Kiln installs nothing it cannot verify. Its
//     MINECRAFT_VERSION is the user's word and picks the Java.
//   - Start commands are argv lists, never shell lines: no quoting, no
//     injection through a variable's value. A placeholder expands inside
//     one element and never splits it; that is why Forge 1.17+ needs the
//     second template (@argsfile is one element, -jar x.jar two).
//   - SERVER_MEMORY is the Java heap (Xms = Xmx), not the memory limit of
//     the process or container: the caller leaves headroom for the JVM.
//   - The Minecraft EULA is the user's to accept (issue 16): EULA
//     defaults to false, and NeedsEULA/EULAAccepted say whether a server
//     may start; the servers package refuses a start, the deployments
//     executor a run, without EULA=true. Every game server needs it (the
//     variable comes with include minecraft-server); proxies and kiln-test
//     have none.
//   - A variable's type is its `type` (boolean, integer, number, string,
//     players), else its default's kind; `enum`, `min`/`max` and
//     `requires` (ENABLE_RCON needs RCON_PASSWORD) are checked by Env, so
//     create, PATCH and a spec's push refuse a bad value at env.KEY.
//     An integer default is an integer now (MAX_PLAYERS=20.5 was accepted
//     as a number before and broke server.properties).
//   - server.properties variables without a default (DIFFICULTY…) write
//     nothing until set, so the key stays the file's, or a deployment
//     spec's `properties`, until then; with a default (MOTD, MAX_PLAYERS,
//     ONLINE_MODE, ENABLE_RCON=false) Kiln always owns the key.
//   - Secret variables (RCON_PASSWORD) reach the software through its
//     config file only, never its process environment.
//   - OPS and WHITELIST are lists of name or name:uuid (ParsePlayers);
//     OfflineUUID is Java's UUID.nameUUIDFromBytes("OfflinePlayer:"+name).
//   - ${JVM_FLAGS} is the one placeholder that expands to several argv
//     elements (or none): its value is catalog data, never user input.
//     Aikar's flags go on every game server, Forge and NeoForge included
//     (before the @args file, which holds only classpath and main
//     class); proxies keep Velocity's recommended flags. The flags start
//     Java 8 to 25 (checked with 17 and 25 at 256 MiB and 1 GiB heaps).
//   - Every profile lists the same Java image choices (8, 11, 17, 21, 25;
//     kiln-test and kiln-test-proxy their own image); Image picks the one
//     matching a Java major.
//   - The Java table's year-based row (26.x → 25) is marked "verify" in the
//     research; installers that know Mojang's javaVersion.majorVersion
//     report it and that value wins.
package catalog
