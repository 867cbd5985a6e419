// Package catalog owns the software profiles: what Kiln can install and run
// (Paper, Purpur, Folia, Vanilla, Fabric, Quilt, Forge, NeoForge, Velocity,
// Waterfall, BungeeCord, and in development mode the bundled kiln-test
// server and kiln-test-proxy), and how to start, stop and place plugins
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
//   - start: the start command as an argv template with ${VAR}
//     placeholders, JVM flags included; start_args_file the variant for
//     installs that leave a JVM args file instead of a jar (Forge 1.17+);
//     large_heap the flag swaps for big heaps (Aikar's ≥ 12 GiB variant);
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
//     9 waterfall, 10 bungeecord, 11 quilt, 100 kiln-test, 101 kiln-test-proxy.
//   - Start commands are argv lists, never shell lines: no quoting, no
//     injection through a variable's value. A placeholder expands inside
//     one element and never splits it; that is why Forge 1.17+ needs the
//     second template (@argsfile is one element, -jar x.jar two).
//   - SERVER_MEMORY is the Java heap (Xms = Xmx), not the memory limit of
//     the process or container: the caller leaves headroom for the JVM.
//   - EULA defaults to true so a server created without env starts (the
//     deployment spec examples set none); its description says that true
//     means accepting the Minecraft EULA. The installer writes eula.txt.
//   - Every profile lists the same Java image choices (8, 11, 17, 21, 25;
//     kiln-test and kiln-test-proxy their own image); Image picks the one
//     matching a Java major.
//   - The Java table's year-based row (26.x → 25) is marked "verify" in the
//     research; installers that know Mojang's javaVersion.majorVersion
//     report it and that value wins.
package catalog
