// Package netguard decides which network addresses a remote download
// (POST /files/pull, api.md §4) may connect to, and provides the dialer,
// http.Transport and http.Client that enforce it on every connection,
// redirects included.
//
// It owns the block list (Blocked), the operator's allow list
// (--pull-allow-cidr, ParseAllowList and Policy), the guarded dial
// (Policy.DialContext), and the HTTP plumbing around it (Policy.Transport,
// Policy.Client, CheckRedirect). It does not fetch anything, know about
// servers, files or quotas, log, or read flags or the environment; callers
// pass the parsed allow list and a Resolver. Unlike a domain package it
// imports net/http, because an http.Transport is what it provides.
//
// It must never open a connection to an address that has not been checked
// at connect time, never take a proxy (from the environment or from a base
// transport), never resolve a name twice for one connection, and never
// decide by the spelling of a host (all checks are on netip.Addr values).
//
// Decisions:
//   - The check that counts is in net.Dialer.Control, which runs on each
//     socket after socket(2) and before connect(2) with the address connect
//     will be given. Wings (GHSA-6rg3-8h8x-5xfv, then CVE-2024-34068)
//     resolved and checked the host, then let the HTTP client dial the
//     name again: a DNS answer with a short TTL could be public for the
//     check and 127.0.0.1 for the dial (DNS rebinding, a time-of-check to
//     time-of-use gap). Here the name is resolved once, the answers are
//     checked and dialed as IP literals, and Control checks again what is
//     actually connected; nothing is sent before it passes.
//   - Every answer of a name is checked; refused ones are skipped and the
//     allowed ones tried in order (each up to the dialer's 30 s timeout
//     within the context). Only when every answer is refused is the error
//     a *BlockedError; the first refused answer is reported.
//   - Proxies are off (Transport.Proxy is nil, base's proxy settings are
//     dropped). Through a proxy the dialed address is the proxy's, and
//     the proxy would reach internal targets for us.
//   - Transport builds a new http.Transport and copies only tuning fields
//     from base rather than cloning it: Clone would carry Dial*, Proxy and
//     protocols registered with RegisterProtocol (file://), each a way
//     round the check. A field added to http.Transport later is dropped
//     until someone decides it is safe.
//   - Redirects: at most MaxRedirects (5), http and https only, in
//     CheckRedirect; the target's address is checked by the dial like any
//     other, so a public server cannot redirect to an internal one.
//   - Embedded IPv4: the IPv4-mapped, IPv4-compatible, NAT64 (64:ff9b::/96)
//     and 6to4 forms are refused when the IPv4 address inside is, since a
//     kernel, translator or tunnel may deliver them to it. Teredo
//     (2001::/32) and local-use NAT64 (64:ff9b:1::/48) are refused
//     outright: Teredo carries an obfuscated client IPv4 address chosen by
//     whoever wrote the address, and the layout of a local-use NAT64
//     prefix (where the IPv4 bits sit) is known only to the local
//     translator, so neither can be checked. Beyond api.md, IPv6 outside
//     2000::/3 (unallocated), 2001::/23, 3fff::/20 and fec0::/10 are
//     refused too, the IPv6 counterparts of ranges the IPv4 list refuses.
//   - The allow list overrides the block list for addresses inside an
//     allowed prefix and for nothing else. A prefix matches addresses of
//     its own family as written: 127.0.0.1/32 allows 127.0.0.1 but not
//     [::ffff:127.0.0.1], 64:ff9b::7f00:1 or 127.0.0.2, so allowing one
//     test server opens no other spelling or range. Resolver answers are
//     unmapped first, because net.Resolver.LookupNetIP returns IPv4
//     answers as ::ffff:a.b.c.d. Allow entries must be CIDR prefixes
//     without host bits; zones never match.
package netguard
