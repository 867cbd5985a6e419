// Package modcatalog answers the mod catalog endpoints (api.md §7) from
// CurseForge (Core API v1) and Modrinth (API v2), and installs a catalog's
// file into a server's mods/ or plugins/ directory.
//
// It owns the two HTTP clients (base URLs, the x-api-key header, a
// User-Agent naming Kiln and a contact as Modrinth requires), the
// validation of the endpoints' query parameters, the normalized answers
// ({count, total_count|total_hits, results}: our shapes, never the
// upstream's passed through), an in-memory cache, the retry policy, a
// client-side rate limit for Modrinth, and the choice of directory and
// hash of an install. It does not download files itself (internal/pull
// does, with its SSRF rules, disk reservation and progress), nor decide
// which addresses may be reached (internal/netguard does, on every
// connection), nor know HTTP status codes of Kiln's API: it returns
// errors (ErrUpstream, ErrNotConfigured, ErrNotFound, *validate.Error) that
// internal/api maps. Like pull and netguard it imports net/http, as a
// client only.
//
// What it must never do: call an upstream for a request that fails
// validation; connect other than through the netguard client; send the
// CurseForge key anywhere but CurseForge's base URL, or log or return it;
// pass an upstream's body or reason phrase through to the user; keep a
// file whose hash does not match the catalog's; send Modrinth more than
// Options.ModrinthPerMinute requests in a minute; run a goroutine that
// Close does not wait for.
//
// Decisions (where the spec is silent):
//   - Query parameters not listed for an endpoint, or given twice, are a
//     validation error naming them: a typo ("pagesize") should not be
//     silently ignored. Empty values count as absent.
//   - CurseForge classId accepts 6 (mods), 4471 (modpacks, the default)
//     and 5 (Bukkit plugins), the classes a server can use. sortField
//     takes CurseForge's numbers (1–12) or their names (featured,
//     popularity, lastUpdated, name, author, totalDownloads, category,
//     gameVersion, earlyAccess, featuredReleased, releasedDate, rating),
//     case-insensitive. index + pageSize ≤ 10,000 is checked here, since
//     CurseForge refuses it with a 400 that would look like its failure.
//   - Modrinth's versions and loaders (search) and loaders and
//     game_versions (project versions) are comma-separated lists, each
//     value ORed; search loaders become categories: facets, which is where
//     Modrinth files loaders. The search always sends index (default
//     relevance), limit and offset, so the cache key is canonical. A
//     project's versions are asked with include_changelog=false, as
//     Modrinth advises: changelogs are not in our answer. A slug or id of
//     dots only ("..") is refused: it would be a path step in the
//     upstream URL. The parsing of every endpoint's query is fuzzed
//     (FuzzCatalogQuery): whatever is accepted is inside the upstream's
//     bounds, and index + pageSize is checked without overflow.
//   - Download URLs: CurseForge's downloadUrl is null when the author
//     forbids third-party downloads; the file then has download_url null
//     and download_note saying so (and the project allow_distribution
//     false with distribution_note). allowModDistribution null (old
//     projects) counts as allowed, as CurseForge's own client does.
//   - Errors: an upstream 404 is ErrNotFound; 401/403 (a bad key), other
//     4xx, timeouts, connection errors, a body over 8 MiB or one that is
//     not the documented JSON are *UpstreamError (ErrUpstream), whose
//     message names the catalog and the failure but never the key or the
//     upstream's text; a connection that failed says why when that is
//     something to act on (a name that does not resolve, a refused
//     connection or a private address, no route, a certificate not
//     accepted), never the address. Validation runs before the key check, so a bad
//     query is 400 even when CurseForge is not configured.
//   - Retries: 5xx, 429, timeouts and connection errors are tried again,
//     Options.Attempts (3) times in all; the wait is Retry-After (seconds
//     or an HTTP date), else X-Ratelimit-Reset on a 429, else 250 ms
//     doubling. A wait longer than Options.MaxRetryWait (5 s) fails the
//     call at once rather than holding the request. Each attempt is
//     bounded by Options.Timeout (10 s).
//   - Modrinth's 300 requests a minute: a token bucket with a burst of 20
//     refilled at 280 a minute, so no minute holds more than 300. Waiters
//     reserve in order and sleep; nothing spins. CurseForge publishes no
//     limit and has none here.
//   - Cache: successful answers only, keyed by the upstream URL, for
//     Options.CacheTTL (5 min), at most CacheEntries (2,000) and
//     CacheBytes (64 MiB) counted as the answers' JSON sizes (the live
//     heap of a cached answer is about 1.4 times that:
//     BenchmarkCacheMemory), least recently used first out. Cached values
//     are shared: callers must not modify them.
//   - Search hits of CurseForge carry the distinct game versions and
//     loaders of the project's latest files, not the files themselves
//     (GET /curseforge/projects/{id} lists them): a popular mod lists
//     dozens, and 1,000 cached pages of them would hold 58 MiB instead of
//     11 (the target is 20).
//   - Metrics (Options.Metrics, Prometheus in kiln serve): every
//     upstream request, retries included, by catalog and outcome (ok,
//     not_found, rate_limited, server_error, refused, client_error,
//     invalid_answer, timeout, unreachable, canceled) with its latency,
//     and every cache lookup as a hit or a miss. Labels come from these
//     fixed sets only.
//   - Identical concurrent requests share one upstream call
//     (singleflight, same key as the cache). The call runs detached from
//     the first caller's cancellation, so one client leaving does not
//     fail the others; it is bounded by the retry policy, and Close
//     cancels and waits for it.
//   - Installs (Installer): the directory is the server profile's
//     plugin_dir ("/plugins" or "/mods"); a profile without one (vanilla)
//     refuses. Which files a software loads is the table runs (paper:
//     paper, spigot, bukkit; purpur adds purpur; folia: folia; fabric,
//     forge, neoforge: their own; velocity, bungeecord, waterfall: theirs;
//     kiln-test stands in for Paper). CurseForge Bukkit plugins (class 5)
//     go on any software that loads bukkit; CurseForge mods by the loaders
//     in the file's gameVersions; modpacks are refused (POST …/modpack).
//     A file whose game versions do not include the server's (when it is
//     a concrete version, not "latest") is refused; CurseForge plugins
//     listing "1.20" match 1.20.x. Refusals are *validate.Error at the
//     field naming the file (version_id, file_id), with a sentence naming
//     both sides, so the API answers 400 without a new code.
//   - The hash kept: Modrinth sha512, else sha1; CurseForge sha1, else
//     md5; a file without any is refused. pull.Manager.StartVerified
//     hashes the body as it is written and fails the download (temporary
//     file removed, nothing replaced) on a mismatch. Required dependencies
//     are returned for the user, not installed.
package modcatalog
