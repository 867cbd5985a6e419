package netguard_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/netguard"
)

// blockedCases lists, for every refused range, its first and last address
// and the addresses just outside it. reason is a substring the reason must
// contain ("" for an address that must pass). An address just outside a
// range that falls in a neighbouring refused range says which.
var blockedCases = []struct {
	addr   string
	reason string
}{
	// 0.0.0.0/8
	{"0.0.0.0", "0.0.0.0/8"},
	{"0.255.255.255", "0.0.0.0/8"},
	{"1.0.0.0", ""},
	// 10.0.0.0/8
	{"9.255.255.255", ""},
	{"10.0.0.0", "10.0.0.0/8"},
	{"10.255.255.255", "10.0.0.0/8"},
	{"11.0.0.0", ""},
	// 100.64.0.0/10
	{"100.63.255.255", ""},
	{"100.64.0.0", "100.64.0.0/10"},
	{"100.127.255.255", "100.64.0.0/10"},
	{"100.128.0.0", ""},
	// 127.0.0.0/8
	{"126.255.255.255", ""},
	{"127.0.0.0", "127.0.0.0/8"},
	{"127.0.0.1", "127.0.0.0/8"},
	{"127.255.255.255", "127.0.0.0/8"},
	{"128.0.0.0", ""},
	// 169.254.0.0/16
	{"169.253.255.255", ""},
	{"169.254.0.0", "169.254.0.0/16"},
	{"169.254.169.254", "169.254.0.0/16"},
	{"169.254.255.255", "169.254.0.0/16"},
	{"169.255.0.0", ""},
	// 172.16.0.0/12
	{"172.15.255.255", ""},
	{"172.16.0.0", "172.16.0.0/12"},
	{"172.31.255.255", "172.16.0.0/12"},
	{"172.32.0.0", ""},
	// 192.0.0.0/24
	{"191.255.255.255", ""},
	{"192.0.0.0", "192.0.0.0/24"},
	{"192.0.0.255", "192.0.0.0/24"},
	{"192.0.1.0", ""},
	// 192.0.2.0/24
	{"192.0.1.255", ""},
	{"192.0.2.0", "192.0.2.0/24"},
	{"192.0.2.255", "192.0.2.0/24"},
	{"192.0.3.0", ""},
	// 192.168.0.0/16
	{"192.167.255.255", ""},
	{"192.168.0.0", "192.168.0.0/16"},
	{"192.168.255.255", "192.168.0.0/16"},
	{"192.169.0.0", ""},
	// 198.18.0.0/15
	{"198.17.255.255", ""},
	{"198.18.0.0", "198.18.0.0/15"},
	{"198.19.255.255", "198.18.0.0/15"},
	{"198.20.0.0", ""},
	// 198.51.100.0/24
	{"198.51.99.255", ""},
	{"198.51.100.0", "198.51.100.0/24"},
	{"198.51.100.255", "198.51.100.0/24"},
	{"198.51.101.0", ""},
	// 203.0.113.0/24
	{"203.0.112.255", ""},
	{"203.0.113.0", "203.0.113.0/24"},
	{"203.0.113.255", "203.0.113.0/24"},
	{"203.0.114.0", ""},
	// 224.0.0.0/4; the address after it is the first of 240.0.0.0/4
	{"223.255.255.255", ""},
	{"224.0.0.0", "224.0.0.0/4"},
	{"239.255.255.255", "224.0.0.0/4"},
	// 240.0.0.0/4, up to the end of IPv4
	{"240.0.0.0", "240.0.0.0/4"},
	{"255.255.255.254", "240.0.0.0/4"},
	{"255.255.255.255", "240.0.0.0/4"},
	// public IPv4
	{"1.1.1.1", ""},
	{"8.8.8.8", ""},
	{"9.9.9.9", ""},

	// ::/128 and ::1/128; their neighbours are IPv4-compatible forms
	{"::", "::/128"},
	{"::1", "::1/128"},
	{"::2", "IPv4-compatible ::/96 (deprecated, RFC 4291) form of 0.0.0.2, which is in 0.0.0.0/8"},
	// ::/96 IPv4-compatible: classified by the IPv4 address inside
	{"::0.0.0.3", "0.0.0.0/8"},
	{"::127.0.0.1", "IPv4-compatible"},
	{"::10.0.0.1", "10.0.0.0/8"},
	{"::1.1.1.1", ""},
	{"::255.255.255.255", "240.0.0.0/4"},
	{"::1:0:0", "outside 2000::/3"},
	// ::ffff:0:0/96 IPv4-mapped
	{"::fffe:ffff:ffff", "outside 2000::/3"},
	{"::ffff:0.0.0.0", "IPv4-mapped ::ffff:0:0/96 form of 0.0.0.0, which is in 0.0.0.0/8"},
	{"::ffff:127.0.0.1", "IPv4-mapped ::ffff:0:0/96 form of 127.0.0.1, which is in 127.0.0.0/8"},
	{"::ffff:10.0.0.1", "10.0.0.0/8"},
	{"::ffff:172.16.0.1", "172.16.0.0/12"},
	{"::ffff:192.168.1.1", "192.168.0.0/16"},
	{"::ffff:169.254.169.254", "169.254.0.0/16"},
	{"::ffff:100.64.0.1", "100.64.0.0/10"},
	{"::ffff:255.255.255.255", "240.0.0.0/4"},
	{"::ffff:1.1.1.1", ""},
	{"::ffff:8.8.8.8", ""},
	{"::1:0:0:0", "outside 2000::/3"},
	// ::ffff:0:0:0/96, the SIIT "IPv4-translated" form: not a destination
	{"::ffff:0:7f00:1", "outside 2000::/3"},
	{"::ffff:0:101:101", "outside 2000::/3"},
	// 64:ff9b::/96 NAT64
	{"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"64:ff9b::", "NAT64 64:ff9b::/96 form of 0.0.0.0, which is in 0.0.0.0/8"},
	{"64:ff9b::127.0.0.1", "NAT64 64:ff9b::/96 form of 127.0.0.1, which is in 127.0.0.0/8"},
	{"64:ff9b::a00:1", "10.0.0.0/8"},
	{"64:ff9b::192.168.0.1", "192.168.0.0/16"},
	{"64:ff9b::169.254.169.254", "169.254.0.0/16"},
	{"64:ff9b::ffff:ffff", "240.0.0.0/4"},
	{"64:ff9b::1.1.1.1", ""},
	{"64:ff9b::808:808", ""},
	{"64:ff9b::1:0:0", "outside 2000::/3"},
	// 64:ff9b:1::/48 local-use NAT64: refused whatever it embeds
	{"64:ff9b:0:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"64:ff9b:1::", "64:ff9b:1::/48"},
	{"64:ff9b:1::1.1.1.1", "64:ff9b:1::/48"},
	{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "64:ff9b:1::/48"},
	{"64:ff9b:2::", "outside 2000::/3"},
	// 2002::/16 6to4: the IPv4 address is bits 16-47
	{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
	{"2002::", "6to4 2002::/16 form of 0.0.0.0, which is in 0.0.0.0/8"},
	{"2002:7f00:1::", "6to4 2002::/16 form of 127.0.0.1, which is in 127.0.0.0/8"},
	{"2002:a00:1::1", "10.0.0.0/8"},
	{"2002:c0a8:101:ffff:ffff:ffff:ffff:ffff", "192.168.0.0/16"},
	{"2002:a9fe:a9fe::", "169.254.0.0/16"},
	{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "240.0.0.0/4"},
	{"2002:101:101::1", ""},
	{"2002:808:808::", ""},
	{"2003::", ""},
	// 2001::/32 Teredo, inside 2001::/23 IETF protocol assignments
	{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
	{"2001::", "2001::/32 (Teredo"},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32 (Teredo"},
	{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/32 (Teredo"},
	{"2001:1::", "2001::/23"},
	{"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23"},
	{"2001:200::", ""},
	// 2001:db8::/32 documentation
	{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", ""},
	{"2001:db8::", "2001:db8::/32"},
	{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::/32"},
	{"2001:db9::", ""},
	// 3fff::/20 documentation
	{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
	{"3fff::", "3fff::/20"},
	{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff::/20"},
	{"3fff:1000::", ""},
	// 100::/64 discard-only
	{"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"100::", "100::/64"},
	{"100::ffff:ffff:ffff:ffff", "100::/64"},
	{"100:0:0:1::", "outside 2000::/3"},
	// fc00::/7 unique local
	{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"fc00::", "fc00::/7"},
	{"fd00::2", "fc00::/7"},
	{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7"},
	{"fe00::", "outside 2000::/3"},
	// fe80::/10 link-local, then fec0::/10 site-local
	{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"fe80::", "fe80::/10"},
	{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::/10"},
	{"fec0::", "fec0::/10"},
	{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::/10"},
	// ff00::/8 multicast, up to the end of IPv6
	{"ff00::", "ff00::/8"},
	{"ff02::1", "ff00::/8"},
	{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::/8"},
	// 2000::/3 global unicast
	{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside 2000::/3"},
	{"2000::", ""},
	{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
	{"4000::", "outside 2000::/3"},
	// public IPv6
	{"2606:4700:4700::1111", ""},
	{"2001:4860:4860::8888", ""},
	// zones
	{"fe80::1%eth0", "zone (eth0)"},
	{"::1%lo", "zone"},
	{"2606:4700:4700::1111%eth0", "zone"},
}

func TestBlocked(t *testing.T) {
	for _, tc := range blockedCases {
		t.Run(tc.addr, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.addr)
			reason, blocked := netguard.Blocked(ip)
			if want := tc.reason != ""; blocked != want {
				t.Fatalf("Blocked(%s) = %q, %v, want blocked %v", ip, reason, blocked, want)
			}
			if blocked != (reason != "") {
				t.Errorf("Blocked(%s) = %q, %v: a reason goes with blocked and only with it", ip, reason, blocked)
			}
			if !strings.Contains(reason, tc.reason) {
				t.Errorf("Blocked(%s) reason = %q, want it to contain %q", ip, reason, tc.reason)
			}
		})
	}
}

func TestBlockedZeroAddr(t *testing.T) {
	if reason, blocked := netguard.Blocked(netip.Addr{}); !blocked {
		t.Errorf("Blocked(netip.Addr{}) = %q, %v, want blocked", reason, blocked)
	}
}

// TestBlockedCoversSpec checks the first and last address of every range
// api.md §4 names, computed from the prefix rather than written out.
func TestBlockedCoversSpec(t *testing.T) {
	spec := []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
		"2001::/32", "100::/64", "2001:db8::/32", "64:ff9b:1::/48",
	}
	for _, s := range spec {
		p := netip.MustParsePrefix(s)
		for _, ip := range []netip.Addr{p.Addr(), lastAddr(p)} {
			if reason, blocked := netguard.Blocked(ip); !blocked {
				t.Errorf("Blocked(%s) = %q, false, want blocked (in %s)", ip, reason, s)
			}
			if ip.Is4() {
				mapped := netip.AddrFrom16(ip.As16())
				if reason, blocked := netguard.Blocked(mapped); !blocked {
					t.Errorf("Blocked(%s) = %q, false, want blocked (mapped %s)", mapped, reason, s)
				}
			}
		}
	}
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		bits := p.Bits() - i*8
		switch {
		case bits <= 0:
			b[i] = 0xff
		case bits < 8:
			b[i] |= 0xff >> bits
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
