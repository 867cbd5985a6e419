package netguard_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/netguard"
)

func TestParseAllowList(t *testing.T) {
	good := []string{"127.0.0.1/32", " 10.0.0.0/8 ", "fd00::/8", "::ffff:127.0.0.0/104", "0.0.0.0/0"}
	got, err := netguard.ParseAllowList(good)
	if err != nil {
		t.Fatalf("ParseAllowList(%q) error = %v", good, err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("fd00::/8"),
		netip.MustParsePrefix("::ffff:127.0.0.0/104"),
		netip.MustParsePrefix("0.0.0.0/0"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("ParseAllowList(%q) = %v, want %v", good, got, want)
	}

	for _, tc := range []struct{ in, wantErr string }{
		{"", "not a CIDR prefix"},
		{"127.0.0.1", "not a CIDR prefix"},
		{"::1", "not a CIDR prefix"},
		{"10.1.2.3/8", "host bits set, the prefix is 10.0.0.0/8"},
		{"fd00::1/8", "host bits set, the prefix is fd00::/8"},
		{"1.2.3.4/33", "allow"},
		{"fe80::/10%eth0", "allow"},
		{"fe80::%eth0/10", "allow"},
		{"localhost/32", "allow"},
		{"10.0.0.0/-1", "allow"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := netguard.ParseAllowList([]string{"127.0.0.1/32", tc.in})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseAllowList([127.0.0.1/32 %q]) = %v, %v, want error containing %q", tc.in, got, err, tc.wantErr)
			}
		})
	}
}

func TestPolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allow   []string
		allowed []string
		refused []string
	}{
		{
			name:    "no allow list",
			allowed: []string{"1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"},
			refused: []string{"127.0.0.1", "10.0.0.1", "::1", "fe80::1%eth0"},
		},
		{
			name:    "one loopback address",
			allow:   []string{"127.0.0.1/32"},
			allowed: []string{"127.0.0.1", "1.1.1.1"},
			refused: []string{
				"127.0.0.0", "127.0.0.2", "127.255.255.255", "0.0.0.0", "10.0.0.1", "::1", "::",
				"::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::",
			},
		},
		{
			name:    "private range",
			allow:   []string{"10.0.0.0/8"},
			allowed: []string{"10.0.0.0", "10.1.2.3", "10.255.255.255"},
			refused: []string{"127.0.0.1", "100.64.0.1", "172.16.0.1", "192.168.0.1", "::ffff:10.1.2.3", "64:ff9b::a01:203"},
		},
		{
			name:    "unique local range",
			allow:   []string{"fd00::/8"},
			allowed: []string{"fd00::2", "fdff::1"},
			refused: []string{"fc00::1", "fe80::1", "::1", "10.0.0.1"},
		},
		{
			name:    "mapped prefix allows only the mapped form",
			allow:   []string{"::ffff:127.0.0.0/104"},
			allowed: []string{"::ffff:127.0.0.1"},
			refused: []string{"127.0.0.1", "::ffff:10.0.0.1"},
		},
		{
			name:    "zones never match",
			allow:   []string{"fe80::/10"},
			allowed: []string{"fe80::1"},
			refused: []string{"fe80::1%eth0", "fe80::1%1"},
		},
		{
			name:    "several prefixes",
			allow:   []string{"127.0.0.1/32", "::1/128"},
			allowed: []string{"127.0.0.1", "::1"},
			refused: []string{"127.0.0.2", "::2", "::ffff:127.0.0.1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow, err := netguard.ParseAllowList(tc.allow)
			if err != nil {
				t.Fatalf("ParseAllowList(%q) error = %v", tc.allow, err)
			}
			p := netguard.NewPolicy(allow, hosts{})
			for _, s := range tc.allowed {
				if err := p.Check(netip.MustParseAddr(s)); err != nil {
					t.Errorf("allow %q: Check(%s) = %v, want nil", tc.allow, s, err)
				}
			}
			for _, s := range tc.refused {
				ip := netip.MustParseAddr(s)
				err := p.Check(ip)
				be, ok := errors.AsType[*netguard.BlockedError](err)
				if !ok {
					t.Errorf("allow %q: Check(%s) = %v, want *BlockedError", tc.allow, s, err)
					continue
				}
				if be.Addr != ip || be.Reason == "" {
					t.Errorf("allow %q: Check(%s) = %+v, want Addr %s and a reason", tc.allow, s, be, ip)
				}
			}
		})
	}
}

func TestBlockedErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  *netguard.BlockedError
		want string
	}{
		{
			&netguard.BlockedError{Addr: netip.MustParseAddr("127.0.0.3"), Host: "evil.test", Reason: "127.0.0.0/8 (loopback, RFC 1122)"},
			`address 127.0.0.3 of "evil.test" refused: 127.0.0.0/8 (loopback, RFC 1122)`,
		},
		{
			&netguard.BlockedError{Addr: netip.MustParseAddr("::1"), Reason: "::1/128 (loopback)"},
			`address ::1 refused: ::1/128 (loopback)`,
		},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("(%+v).Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}
