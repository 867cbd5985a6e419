package node

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/node/nodetest"
)

func TestParseAllowed(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.5:5432":   "10.0.0.5/32:5432",
		"192.168.1.7/24":  "192.168.1.0/24",
		"[fd00::5]:3306":  "fd00::5/128:3306",
		"fd00::/64":       "fd00::/64",
		"127.0.0.1":       "127.0.0.1/32",
		"[::1]":           "::1/128",
		"127.0.0.1/8:443": "127.0.0.0/8:443",
	} {
		a, err := ParseAllowed(in)
		if err != nil || a.String() != want {
			t.Errorf("ParseAllowed(%q) = %s, %v; want %s", in, a, err, want)
		}
	}
	for _, bad := range []string{"", "x", "10.0.0.5:0", "10.0.0.5:65536", "10.0.0.5:05", "[fd00::5", "[fd00::5]x", "fe80::1%eth0", "10.0.0.0/33"} {
		if a, err := ParseAllowed(bad); err == nil {
			t.Errorf("ParseAllowed(%q) = %s, accepted", bad, a)
		}
	}
}

// TestEgress loads the rules into the kernel for a range of test users
// and connects as one of them, and as a user outside the range, to
// loopback listeners only: a game port of the node passes, another port
// of this host (Kiln's API, another server's RCON) is refused at once,
// an allowed address:port passes, and users outside the range are not
// touched. Private, link-local and public ranges are checked in the
// loaded table's text, never by sending them traffic.
func TestEgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP EGRESS SUITE: loading nftables rules needs root")
	}
	game := nodetest.ServeHello(t, netip.MustParseAddrPort("127.0.0.1:0"))
	api := nodetest.ServeHello(t, netip.MustParseAddrPort("127.0.0.1:0"))
	db := nodetest.ServeHello(t, netip.MustParseAddrPort("127.0.0.3:0"))
	other := nodetest.ServeHello(t, netip.MustParseAddrPort("127.0.0.4:0"))
	e := Egress{
		FirstUID: 310000, LastUID: 310009,
		Ports: PortRange{First: int(game.Port()), Last: int(game.Port())},
		Allow: []Allowed{{Prefix: netip.MustParsePrefix("127.0.0.3/32"), Port: db.Port()}},
	}
	if err := ApplyEgress(t.Context(), e); err != nil {
		if err == ErrNoNft && os.Getenv("KILN_REQUIRE_NFT") == "" {
			t.Skip("SKIP EGRESS SUITE: " + err.Error())
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveEgress(context.Background(), e); err != nil {
			t.Error(err)
		}
	})
	const server, stranger = 310003, 320000
	if e := nodetest.ConnectAs(t, server, game); e != "" {
		t.Errorf("a server to a game port of the node: %s", e)
	}
	if e := nodetest.ConnectAs(t, server, db); e != "" {
		t.Errorf("a server to an allowed address and port: %s", e)
	}
	for _, to := range []netip.AddrPort{api, other, netip.AddrPortFrom(db.Addr(), db.Port()+1)} {
		if e := nodetest.ConnectAs(t, server, to); e == "" {
			t.Errorf("a server connected to %s", to)
		}
	}
	for _, to := range []netip.AddrPort{game, api, other} {
		if e := nodetest.ConnectAs(t, stranger, to); e != "" {
			t.Errorf("a user outside the range to %s: %s", to, e)
		}
	}
	out, err := exec.Command("nft", "list", "table", "inet", e.TableName()).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v %s", err, out)
	}
	for _, want := range []string{"meta skuid 310000-310009 jump servers", "169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "ip6 daddr != 2000::/3 reject"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the loaded table lacks %q:\n%s", want, out)
		}
	}
	// Applied again (a restart): replaced, not doubled.
	if err := ApplyEgress(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	out2, _ := exec.Command("nft", "list", "table", "inet", e.TableName()).CombinedOutput()
	if strings.Count(string(out2), "jump servers") != 1 {
		t.Errorf("applied twice, the table holds:\n%s", out2)
	}
}
