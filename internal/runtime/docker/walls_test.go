package docker

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/node/nodetest"
	"github.com/kilnhq/kiln/internal/runtime"
)

// TestWalls proves the network wall around game containers with two real
// ones, a and b, on the runtime's network with the node's rules loaded
// (node.Egress with the network's bridge, as kiln serve loads them): from
// inside a, b's game port answers through its published port (on the
// host's address on the network, where a container reaches the host), as
// it does from the host; b's other listener (an RCON, say), b's game port
// straight at b's address, a service of the host on its address on the
// network, and a link-local address (the cloud metadata service's) are
// refused at once; a name server of the host answers on port 53. The
// link-local connection is tried only once the
// loaded table is seen to refuse that range, so nothing leaves the host.
func TestWalls(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP WALLS: loading nftables rules needs root")
	}
	s := newSuite(t)
	ctx := t.Context()
	gw, err := s.d.Gateway(ctx)
	if err != nil {
		t.Fatalf("Gateway = %v", err)
	}
	portA, portB := freePort(t), freePort(t)
	games := node.PortRange{First: min(portA, portB), Last: max(portA, portB)}
	// A service of the host on its address on the bridge, on a port that
	// is not a game port.
	var other netip.AddrPort
	for other.Port() == 0 || int(other.Port()) >= games.First && int(other.Port()) <= games.Last {
		other = nodetest.ServeHello(t, netip.AddrPortFrom(gw, 0))
	}
	// A name server of the host on its address on the bridge (one on
	// another address of the host, when resolv.conf names it, is the
	// same rule): reached on port 53 only.
	dns, dnsErr := net.Listen("tcp", net.JoinHostPort(gw.String(), "53"))
	if dnsErr == nil {
		t.Cleanup(func() { dns.Close() })
		go func() {
			for {
				c, err := dns.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hello\n"))
				c.Close()
			}
		}()
	} else {
		t.Logf("no name server stand-in on %s:53: %v", gw, dnsErr)
	}
	e := node.Egress{Bridge: s.d.Network(), Ports: games, Resolvers: []netip.Addr{gw}}
	if err := node.ApplyEgress(ctx, e); err != nil {
		if err == node.ErrNoNft && os.Getenv("KILN_REQUIRE_NFT") == "" {
			t.Skip("SKIP WALLS: " + err.Error())
		}
		t.Fatalf("ApplyEgress = %v", err)
	}
	t.Cleanup(func() {
		if err := node.RemoveEgress(context.Background(), e); err != nil {
			t.Errorf("RemoveEgress = %v", err)
		}
	})
	out, err := exec.Command("nft", "list", "table", "inet", e.TableName()).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v\n%s", err, out)
	}
	for _, want := range []string{`iifname "` + s.d.Network() + `" jump servers`, "169.254.0.0/16", "reject"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the loaded table lacks %q, so no link-local address is tried:\n%s", want, out)
		}
	}

	spec := func(port int) runtime.Spec {
		sp := s.spec(t)
		sp.Port, sp.BindHost = port, gw.String()
		sp.Argv = []string{"/echoer", strconv.Itoa(port)}
		return sp
	}
	b := s.start(t, spec(portB))
	b.con.wait(t, "ready")
	const rcon = "25575"
	if err := b.inst.WriteLine("listen " + rcon); err != nil {
		t.Fatal(err)
	}
	b.con.wait(t, "listen "+rcon+" ok")
	res, err := s.d.cli.ContainerInspect(ctx, b.inst.Ref(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("ContainerInspect = %v", err)
	}
	ep := res.Container.NetworkSettings.Networks[s.d.Network()]
	if ep == nil || !ep.IPAddress.IsValid() {
		t.Fatalf("b is not on the network %s: %+v", s.d.Network(), res.Container.NetworkSettings.Networks)
	}
	bAddr := ep.IPAddress.String()
	a := s.start(t, spec(portA))
	a.con.wait(t, "ready")

	published := net.JoinHostPort(gw.String(), strconv.Itoa(portB))
	if got := dialHost(t, published); got != "hello" {
		t.Errorf("from the host, b's published game port %s answers %q, want hello", published, got)
	}
	dialFrom := func(addr string) string {
		t.Helper()
		if err := a.inst.WriteLine("dial " + addr); err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(a.con.waitPrefix(t, "dial "+addr+" "), "dial "+addr+" ")
	}
	if got := dialFrom(published); got != "ok hello" {
		t.Errorf("from a, b's published game port %s: %q, want ok hello", published, got)
	}
	if dnsErr == nil {
		if got := dialFrom(net.JoinHostPort(gw.String(), "53")); got != "ok hello" {
			t.Errorf("from a, the host's name server %s:53: %q, want ok hello", gw, got)
		}
	}
	for what, addr := range map[string]string{
		"b's RCON":                     net.JoinHostPort(bAddr, rcon),
		"b's game port, not published": net.JoinHostPort(bAddr, strconv.Itoa(portB)),
		"a service of the host":        other.String(),
		"the metadata service":         "169.254.169.254:80",
	} {
		got := dialFrom(addr)
		t.Logf("from a, %s (%s): %s", what, addr, got)
		if !strings.HasPrefix(got, "err ") || strings.HasPrefix(got, "err timeout") {
			t.Errorf("from a, %s (%s): %q; want refused at once", what, addr, got)
		}
	}
}

// dialHost connects from the host and reads one line.
func dialHost(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(line)
}
