package netguard

import "net/netip"

// refusedRange is one entry of a block table: the prefix and the reason
// BlockedError reports for addresses inside it.
type refusedRange struct {
	prefix netip.Prefix
	reason string
}

func refused(cidr, what string) refusedRange {
	return refusedRange{prefix: netip.MustParsePrefix(cidr), reason: cidr + " (" + what + ")"}
}

// ipv4Refused lists the IPv4 ranges of api.md §4. The ranges do not
// overlap. Read-only after initialisation.
var ipv4Refused = []refusedRange{
	refused("0.0.0.0/8", "this network, RFC 1122; a connection to 0.0.0.0 reaches the local host"),
	refused("10.0.0.0/8", "private, RFC 1918"),
	refused("100.64.0.0/10", "shared address space (carrier-grade NAT), RFC 6598"),
	refused("127.0.0.0/8", "loopback, RFC 1122"),
	refused("169.254.0.0/16", "link-local, RFC 3927; cloud metadata services live here"),
	refused("172.16.0.0/12", "private, RFC 1918"),
	refused("192.0.0.0/24", "IETF protocol assignments, RFC 6890"),
	refused("192.0.2.0/24", "documentation TEST-NET-1, RFC 5737"),
	refused("192.168.0.0/16", "private, RFC 1918"),
	refused("198.18.0.0/15", "benchmarking, RFC 2544"),
	refused("198.51.100.0/24", "documentation TEST-NET-2, RFC 5737"),
	refused("203.0.113.0/24", "documentation TEST-NET-3, RFC 5737"),
	refused("224.0.0.0/4", "multicast, RFC 5771"),
	refused("240.0.0.0/4", "reserved, RFC 1112, and limited broadcast 255.255.255.255"),
}

// ipv6Refused lists the IPv6 ranges refused whatever they contain. It is
// consulted after ::/128, ::1/128 and the forms that embed an IPv4 address
// (see Blocked). First match wins, so the more specific prefixes come
// first. Read-only after initialisation.
var ipv6Refused = []refusedRange{
	refused("64:ff9b:1::/48", "local-use NAT64, RFC 8215; where the IPv4 address sits depends on the local translator, so it cannot be checked"),
	refused("100::/64", "discard-only, RFC 6666"),
	refused("2001::/32", "Teredo, RFC 4380; embeds a relay and an obfuscated client IPv4 address chosen by whoever wrote the address, and a local Teredo interface would send to it"),
	refused("2001::/23", "IETF protocol assignments, RFC 2928"),
	refused("2001:db8::/32", "documentation, RFC 3849"),
	refused("3fff::/20", "documentation, RFC 9637"),
	refused("fc00::/7", "unique local, RFC 4193"),
	refused("fe80::/10", "link-local, RFC 4291"),
	refused("fec0::/10", "site-local, deprecated by RFC 3879"),
	refused("ff00::/8", "multicast, RFC 4291"),
}

// Prefixes whose addresses embed an IPv4 address; Blocked classifies the
// embedded address. Read-only after initialisation.
var (
	ipv4Mapped     = netip.MustParsePrefix("::ffff:0:0/96")
	ipv4Compatible = netip.MustParsePrefix("::/96")
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	globalUnicast  = netip.MustParsePrefix("2000::/3")
)

// Blocked reports whether a download may not connect to ip and, if so,
// why: the refused range and what it is. It knows nothing of the allow
// list; Policy.Check applies that.
//
// Refused: every IPv4 range of api.md §4; ::/128 and ::1/128; the
// IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96), NAT64
// (64:ff9b::/96) and 6to4 (2002::/16) forms of a refused IPv4 address;
// 64:ff9b:1::/48, 100::/64, 2001::/23 (with Teredo 2001::/32),
// 2001:db8::/32, 3fff::/20, fc00::/7, fe80::/10, fec0::/10 and ff00::/8
// whatever they contain; any other IPv6 address outside 2000::/3 (nothing
// else is allocated for hosts); anything netip reports as unspecified,
// loopback, multicast, link-local or private; addresses with a zone; the
// zero Addr. The embedded forms of a public IPv4 address pass, as it does.
func Blocked(ip netip.Addr) (reason string, blocked bool) {
	switch {
	case !ip.IsValid():
		return "not an IP address", true
	case ip.Zone() != "":
		return "IPv6 address with a zone (" + ip.Zone() + "), which names a local interface", true
	case ip.Is4():
		return blocked4(ip)
	case ip == netip.IPv6Unspecified():
		return "::/128 (unspecified)", true
	case ip == netip.IPv6Loopback():
		return "::1/128 (loopback)", true
	}
	b := ip.As16()
	switch {
	case ipv4Mapped.Contains(ip):
		return embedded("IPv4-mapped ::ffff:0:0/96", ip.Unmap())
	case ipv4Compatible.Contains(ip):
		return embedded("IPv4-compatible ::/96 (deprecated, RFC 4291)", netip.AddrFrom4([4]byte(b[12:16])))
	case nat64.Contains(ip):
		return embedded("NAT64 64:ff9b::/96", netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(ip):
		return embedded("6to4 2002::/16", netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, r := range ipv6Refused {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	if reason, blocked := special(ip); blocked {
		return reason, true
	}
	if !globalUnicast.Contains(ip) {
		return "outside 2000::/3, the only IPv6 range allocated for hosts", true
	}
	return "", false
}

// blocked4 classifies an IPv4 address (ip.Is4()).
func blocked4(ip netip.Addr) (string, bool) {
	for _, r := range ipv4Refused {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	return special(ip)
}

// embedded classifies v4, the IPv4 address inside an address of the given
// form, and names both in the reason.
func embedded(form string, v4 netip.Addr) (string, bool) {
	reason, blocked := blocked4(v4)
	if !blocked {
		return "", false
	}
	return form + " form of " + v4.String() + ", which is in " + reason, true
}

// special asks netip. The tables above already cover everything it
// knows; this stays so that an edit to a table cannot let one through.
func special(ip netip.Addr) (string, bool) {
	switch {
	case ip.IsUnspecified():
		return "unspecified address", true
	case ip.IsLoopback():
		return "loopback address", true
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast address", true
	case ip.IsLinkLocalUnicast():
		return "link-local address", true
	case ip.IsPrivate():
		return "private address", true
	}
	return "", false
}
