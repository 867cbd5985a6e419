package netguard_test

import (
	"net/netip"
	"testing"

	"github.com/kilnhq/kiln/internal/netguard"
)

// FuzzBlocked parses arbitrary text as an address (or takes 4 or 16 raw
// bytes) and checks the classifier's invariants:
//   - a reason goes with blocked, and only with it;
//   - whatever netip calls unspecified, loopback, multicast, link-local,
//     private or not global unicast, and any zone, is blocked;
//   - an IPv4 address is blocked exactly when its IPv4-mapped,
//     IPv4-compatible, NAT64 and 6to4 forms are, and an address of one of
//     those forms exactly when the IPv4 address inside it is;
//   - a Policy without an allow list refuses exactly what Blocked blocks,
//     and a Policy allowing the address's own /32 or /128 refuses nothing.
//
// Seeds are in testdata/fuzz/FuzzBlocked.
func FuzzBlocked(f *testing.F) {
	for _, tc := range blockedCases {
		f.Add(tc.addr)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			switch len(s) {
			case 4:
				ip = netip.AddrFrom4([4]byte([]byte(s)))
			case 16:
				ip = netip.AddrFrom16([16]byte([]byte(s)))
			default:
				return
			}
		}
		reason, blocked := netguard.Blocked(ip)
		if blocked != (reason != "") {
			t.Fatalf("Blocked(%s) = %q, %v: a reason goes with blocked and only with it", ip, reason, blocked)
		}
		if !blocked && (ip.Zone() != "" || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() ||
			ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
			ip.IsPrivate() || !ip.IsGlobalUnicast()) {
			t.Fatalf("Blocked(%s) = false, but netip says it is not a public unicast address", ip)
		}

		if ip.Zone() == "" {
			if v4, form, ok := embeddedIPv4(ip); ok {
				if _, b4 := netguard.Blocked(v4); b4 != blocked {
					t.Fatalf("Blocked(%s) = %v (%q) but Blocked(%s) = %v: the %s form must follow its IPv4 address", ip, blocked, reason, v4, b4, form)
				}
			}
			if ip.Is4() {
				for form, a := range forms(ip) {
					if _, b := netguard.Blocked(a); b != blocked {
						t.Fatalf("Blocked(%s) = %v but Blocked(%s) = %v: the %s form must follow its IPv4 address", ip, blocked, a, b, form)
					}
				}
			}
		}

		err = netguard.NewPolicy(nil, hosts{}).Check(ip)
		if (err != nil) != blocked {
			t.Fatalf("Blocked(%s) = %v, but a Policy without allow list: Check = %v", ip, blocked, err)
		}
		if ip.IsValid() {
			own := netip.PrefixFrom(ip.WithZone(""), ip.BitLen())
			err := netguard.NewPolicy([]netip.Prefix{own}, hosts{}).Check(ip)
			if (err == nil) != (ip.Zone() == "") {
				t.Fatalf("allow %s: Check(%s) = %v, want nil unless it has a zone", own, ip, err)
			}
		}
	})
}

// forms returns the IPv6 forms that embed v4.
func forms(v4 netip.Addr) map[string]netip.Addr {
	b := v4.As4()
	compat := [16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}
	nat := [16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}
	six := [16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3]}
	return map[string]netip.Addr{
		"IPv4-mapped":     netip.AddrFrom16(v4.As16()),
		"IPv4-compatible": netip.AddrFrom16(compat),
		"NAT64":           netip.AddrFrom16(nat),
		"6to4":            netip.AddrFrom16(six),
	}
}

// embeddedIPv4 returns the IPv4 address inside an IPv6 address of one of
// the forms Blocked classifies by it. ::/128 and ::1/128 have their own
// entries and are left out.
func embeddedIPv4(ip netip.Addr) (netip.Addr, string, bool) {
	if !ip.Is6() || ip == netip.IPv6Unspecified() || ip == netip.IPv6Loopback() {
		return netip.Addr{}, "", false
	}
	b := ip.As16()
	switch {
	case netip.MustParsePrefix("::ffff:0:0/96").Contains(ip):
		return ip.Unmap(), "IPv4-mapped", true
	case netip.MustParsePrefix("::/96").Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:])), "IPv4-compatible", true
	case netip.MustParsePrefix("64:ff9b::/96").Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:])), "NAT64", true
	case netip.MustParsePrefix("2002::/16").Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}
