// Package install fetches server software from each project's official
// API into a server root: Fill v3 (Paper, Folia, Velocity, Waterfall),
// Purpur, Mojang's piston-meta (Vanilla), Fabric meta, Quilt meta and
// quilt-installer, the Forge and NeoForge Mavens, and BungeeCord's Jenkins;
// kiln-test and kiln-test-proxy need nothing.
//
// It owns downloading what package upstream resolves (a concrete version
// and build for "latest" or a pin), verifying every checksum the upstream
// publishes, the content-addressed artifact cache shared by all servers,
// running the Forge, NeoForge and Quilt installers, and writing the jar
// (and eula.txt) into the root; and Configure and the proxy wiring, the
// files Kiln edits before a start. It never starts a server, never picks
// ports or memory, and never writes anything but whole files into a root.
//
// What to install comes from package upstream (install/upstream): it asks
// each project's API which version and build "latest" or a pin means and
// which checksums the upstream publishes, through one Fetcher (mirror,
// User-Agent, size and time limits; its doc has the rules per upstream).
// This package downloads, verifies, caches and places what it names.
//
// Checksums: every artifact is verified against what upstream.* gives
// with it, before it enters the cache. Custom jar (profile custom): the
// SHA-256 the user gives (JAR_SHA256, required). Its URL is the user's, so
// it is fetched through the SSRF guard (Options.UserURLs, the policy of
// remote downloads) and never through the mirror, by the cache's own
// download (same limits, verification and atomic put), at every install:
// the cache is shared by all teams and is never searched for a user's
// jar, so knowing a jar's SHA-256 never gets a team the jar another team
// cached.
//
// Cache: the artifacts live in a blob store (package blob; Options.Artifacts,
// which cmd/kiln sets to the store of --blob-url, or a file store in
// CacheDir): artifacts/sha256/<hex> holds each artifact under its SHA-256;
// artifacts/index/{sha1,md5,url}/<hex> maps an upstream checksum (or URL)
// to that SHA-256, so a second install of the same artifact — on this
// replica or, with an S3 store, any other — makes no download. A download
// goes to <CacheDir>/~downloads (local), is verified, and only then put
// into the store, which never shows a half-written blob, so a bad checksum
// never poisons the cache. A cached blob is re-hashed while it is copied
// into a root; a corrupt one is dropped and downloaded again. New removes
// what a crash left in ~downloads, and the sha256/, index/ and tmp/
// directories that Kiln kept in CacheDir before the cache moved onto the
// blob layer. Why the blob layer: it already gives put-if-absent, atomic
// visibility and durability on both backends; the cache wrote its own
// copies of those (temp file, fsync, rename, directory fsync) before.
//
// Decisions:
//   - The resolvers live in install/upstream, apart from the download,
//     cache and root writes here: asking an API what to install and putting
//     it into a root read separately, and a resolver has no root to write
//     into. Their tests stay here (fixtures_test.go, upstream_test.go):
//     they serve the upstreams' real answers and check the whole install.
//   - Fabric: the Mojang server jar is installed (sha1-verified) as
//     .fabric/server/<game>-server.jar, where the launcher that meta's
//     /server/jar serves (fabric-installer's ServerLauncher) looks for it,
//     so it does not download it again, unverified, at first start. The
//     launcher still fetches loader libraries from Fabric's Maven then.
//   - Quilt's meta serves no ready launcher, so quilt-installer (`install
//     server <game> <loader> --install-dir=.`) runs like the Forge
//     installers; Kiln writes the vanilla server.jar itself, without
//     --download-server, so that download is verified.
//   - A reinstall of Forge or NeoForge removes the previous
//     libraries/net/minecraftforge/forge (net/neoforged/neoforge,
//     net/neoforged/forge) tree right before the new installer runs,
//     through os.Root (a symlink out of the root is refused), once the new
//     installer is downloaded and verified: a bad download leaves the old
//     install whole.
//   - Forge, NeoForge and Quilt installers are upstream code run on the host with
//     `java -jar <installer> --installServer` in the root, through Runner
//     (a seam so an agent or a container can run it instead), with a
//     minimal environment and a 30-minute limit. They download the game jar
//     and libraries themselves, outside the mirror; a failed run may leave
//     some of their libraries/ behind (a rerun overwrites them). Modern
//     versions leave a JVM args file (catalog.Result.ArgsFile), old Forge a jar.
//   - Writes into the root go through os.Root and temp file + rename: a
//     planted symlink is replaced, never written through, and a jar is
//     either the old one or the whole new one.
//   - eula.txt is written from the profile's EULA variable on every
//     install and, by Configure, before every start (false until the user
//     sets EULA=true; an eula.txt that already says the same is left
//     alone).
//   - Configure merges OPS and WHITELIST into ops.json and whitelist.json
//     (existing entries kept, a list entry never removes one); a name
//     without UUID gets the offline UUID when ONLINE_MODE=false, else
//     Installer.Configure asks api.mojang.com through the fetcher (mirror,
//     User-Agent, size and time limits) and the package function refuses.
//
// Wiring (wiring.go, for the deployments executor): WireVelocity,
// WireBungee and WireBackend turn a proxy and its backends into one
// network (deployment-spec.md §4) as pure edits, bytes in and bytes out;
// ReadConfigs and WriteConfigs are the only I/O, with Configure's rules
// (regular files inside the root only, atomic replace, never through a
// symlink). Decisions:
//   - They live here, not in a package of their own, because they edit the
//     same three files as Configure with the same editors (setProperties,
//     the yaml.v3 node helpers, readConfig and writeRoot): one editor per
//     format, and one place that knows what Kiln owns in each file.
//   - velocity.toml is edited line by line, never re-encoded (a TOML
//     encoder drops every comment): the file is cut into statements (a
//     multi-line array is one), Kiln's top-level keys are replaced in place
//     or added after the last top-level key, [servers] is Kiln's alone
//     (every entry replaced, its comments kept), and [forced-hosts]
//     entries naming a server that is no longer a backend are dropped,
//     since Velocity refuses to start with them. github.com/BurntSushi/toml
//     (already the module's TOML library, for kiln's own config) only
//     checks: the input must parse, and the output is parsed again and
//     must say exactly what the wiring says, or the edit is refused with a
//     *ConfigError rather than written.
//   - config.yml, paper-global.yml and spigot.yml are edited as yaml.v3
//     nodes, which keep comments and key order but not the layout (list
//     indentation); BungeeCord, Paper and Spigot rewrite these files
//     themselves anyway. The result of WireBungee is decoded again and
//     checked the same way. A backend's file whose values already say
//     what the wiring says is left byte for byte as it is (WireBackend
//     compares the decoded values before and after): yaml.v3's layout of
//     some comments changes from one encoding to the next, so writing it
//     anyway rewrote the operator's file at every apply and was not
//     idempotent (found by FuzzWireBackend).
//   - Every forwarding mode sets online-mode=false on the backends: behind
//     a proxy the proxy authenticates, and a backend in online mode would
//     refuse the proxy's offline login. Each mode also turns off the other
//     mode's switch where it is set (Paper's proxies.velocity.enabled,
//     Spigot's settings.bungeecord), so a spec that changes mode
//     converges; "none" turns both off. A file is never created only to
//     turn something off.
//   - Secret never prints itself (String, Format, LogValue, MarshalText
//     all redact); Reveal is the one way to the value. NewSecret draws 64
//     characters of [A-Za-z0-9] from crypto/rand, as Shulker does.
//   - Paper before 1.19 (paper.yml settings.velocity-support), Fabric
//     (FabricProxy-Lite) and Forge (Proxy-Compatible-Forge) backends are
//     not wired yet.
package install
