// Package upstream asks each project's official API what to install:
// Fill v3 (Paper, Folia, Velocity, Waterfall), Purpur, Mojang's
// piston-meta (Vanilla), Fabric meta, Quilt meta and Quilt's Maven, the
// Forge and NeoForge Mavens, and BungeeCord's Jenkins. Each resolver turns
// a request ("latest", a version, a build, a loader version) into a
// concrete version and build and the artifact to fetch, with every
// checksum the upstream publishes for it (Release, FabricRelease,
// QuiltRelease, LoaderRelease).
//
// It owns the requests to upstreams (Fetcher: mirror, User-Agent, size
// and time limits, non-2xx answers as *StatusError), the rules of what
// "latest" means on each upstream, and reading their answers. It never
// downloads an artifact, never touches a server root or the artifact
// cache, and never runs anything: package install does all of that with
// what a resolver returns (and checks the jar against the checksums).
//
// Every request carries the User-Agent (PaperMC refuses generic ones),
// refuses non-2xx answers (*StatusError), caps metadata at 16 MiB
// (MetaMax; ErrTooLarge; install caps artifacts at 512 MiB), and is
// bounded by the caller's context plus a timeout (30 s for metadata, 15
// min for a download).
//
// Mirror (--installer-mirror-url): when Fetcher.Mirror is set
// (install.Options.MirrorURL), it replaces every upstream. The scheme of
// the upstream URL is dropped and its host (with port, if any) becomes the
// first path segment under the mirror, path and query kept:
//
//	https://fill.papermc.io/v3/projects/paper
//	  → <mirror>/fill.papermc.io/v3/projects/paper
//	https://piston-data.mojang.com/v1/objects/<sha1>/server.jar
//	  → <mirror>/piston-data.mojang.com/v1/objects/<sha1>/server.jar
//
// Download URLs found inside upstream answers are rewritten the same way,
// so one mirror (a static tree or a caching proxy) serves every upstream.
// Hosts used: fill.papermc.io, fill-data.papermc.io (or whatever host Fill
// names), api.purpurmc.org, piston-meta.mojang.com, piston-data.mojang.com,
// meta.fabricmc.net, meta.quiltmc.org, maven.quiltmc.org (or whatever host
// Quilt's meta names), files.minecraftforge.net, maven.minecraftforge.net,
// maven.neoforged.net, ci.md-5.net. Without a mirror every URL must be
// https.
//
// Per upstream, what "latest" follows (docs/software.md has the operator's
// table):
//   - Fill (https://fill.papermc.io/v3/projects/<p>/versions, then
//     …/versions/<v>/builds): the first version, in Fill's order (the one
//     created last first), that has a STABLE or RECOMMENDED build, and
//     that build; CHANNEL=experimental (Paper, Folia) takes the newest
//     build of any channel. JavaMajor is the version's
//     java.version.minimum.
//   - Purpur (https://api.purpurmc.org/v2/purpur): metadata.current (the
//     last version listed when the answer has none or names an unlisted
//     one), its builds.latest.
//   - Mojang (https://piston-meta.mojang.com/mc/game/version_manifest_v2.json):
//     latest.release; "snapshot" is latest.snapshot.
//   - Fabric (https://meta.fabricmc.net/v2/versions/{game,installer} and
//     /versions/loader/<game>): the first stable entry of each; "snapshot"
//     the first game version whatever its stability.
//   - Quilt (https://meta.quiltmc.org/v3/versions/{game,loader,installer}):
//     the first stable game version ("snapshot": the first), the first
//     loader and installer without a pre-release suffix.
//   - Forge (https://files.minecraftforge.net/net/minecraftforge/forge/promotions_slim.json,
//     https://maven.minecraftforge.net/net/minecraftforge/forge/): the newest
//     game version with a promotion, FORGE_VERSION recommended (else its
//     latest promotion) or latest.
//   - NeoForge (https://maven.neoforged.net/releases/net/neoforged/neoforge/maven-metadata.xml;
//     for 1.20.1 …/net/neoforged/forge/maven-metadata.xml): the newest
//     release; for a game version without one its newest -beta; alphas never.
//   - BungeeCord (https://ci.md-5.net/job/BungeeCord/): lastStableBuild.
//
// Checksums, per upstream:
//   - Fill: sha256 of each build's server:default download, downloaded
//     from the URL in the answer (never built).
//   - Purpur: md5 from the build's metadata.
//   - Mojang: the version document is checked against the manifest's sha1,
//     the server jar against the document's sha1 and size.
//   - Forge, NeoForge, quilt-installer: the Maven sidecar next to the
//     installer jar, the strongest present of .sha256, .sha1, .md5; an
//     installer with no sidecar is refused. What the installers then
//     download themselves (libraries, Forge's game jar) Kiln cannot check.
//   - Fabric publishes no checksum of its server launcher: Kiln records the
//     sha256 it computed (catalog.Result.Checksum is empty) and caches the launcher
//     by its URL, which pins game, loader and installer versions. The
//     vanilla jar beside it is Mojang's, sha1-verified. Quilt's launcher is
//     built by quilt-installer in the root; likewise unverifiable.
//   - BungeeCord publishes none of its own. The jar is verified against
//     the MD5 Jenkins computes of the archived file (the artifact's
//     *fingerprint* page); the build's fingerprint[] list is not used (its
//     net.md-5:BungeeCord.jar entry is Maven's unshaded artifact, another
//     file). No fingerprint: the install is refused, never unverified.
//
// Decisions:
//   - Waterfall comes from Fill v3 like Paper: the v2 API is being sunset,
//     Fill serves every PaperMC project's builds, and Waterfall (end of
//     life) only needs its existing builds.
//   - "latest" for Fill is the newest version that has a STABLE or
//     RECOMMENDED build (Fill lists versions whose builds are all ALPHA or
//     BETA); BUILD_NUMBER pins a build of any channel.
//   - Forge's Maven names are tried as <mc>-<forge>, <mc>-<forge>-<mc>
//     (1.7.10, 1.8.9), <mc>-<forge>-mc172, as itzg/mc-image-helper does.
//   - The resolvers are plain functions of a *Fetcher, with the
//     standard library only (net/http, encoding/json, encoding/xml): the
//     answers are small documents, and a client library per upstream would
//     add more than it saves.
package upstream
