package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Egress is what the game servers of this node may connect to, enforced
// by the kernel (nftables): the network wall (doc.go, "Egress"). A server
// reaches the internet, other servers through the game ports of this node
// (Ports, on any address of this host), the name servers of Resolvers on
// port 53, and the operator's Allow entries (a range, optionally one
// port: database hosts, a private mod mirror); nothing else of this host
// (Kiln's API, SSH, a database on loopback, another server's RCON) and no
// private, loopback, link-local, shared or reserved range.
//
// Whose traffic is judged: with Bridge empty, every socket the users
// FirstUID-LastUID own (the process runtime); with Bridge set, every
// packet that comes in from that network interface (the docker runtime's
// bridge: the containers' traffic, whatever uid it runs as), to this host
// (input) and through it (forward). Through it, a connection to another
// container on the bridge is refused too: containers meet only through
// published game ports.
type Egress struct {
	FirstUID, LastUID uint32
	Bridge            string
	Ports             PortRange
	Resolvers         []netip.Addr
	Allow             []Allowed
}

// Allowed is one exception: a range and, if not 0, one TCP/UDP port.
type Allowed struct {
	Prefix netip.Prefix
	Port   uint16
}

func (a Allowed) String() string {
	if a.Port == 0 {
		return a.Prefix.String()
	}
	return fmt.Sprintf("%s:%d", a.Prefix, a.Port)
}

// ParseAllowed reads "ADDR[/BITS][:PORT]" ("10.0.0.5:5432",
// "192.168.1.0/24", "[fd00::5]:3306", "fd00::/64").
func ParseAllowed(s string) (Allowed, error) {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return Allowed{}, fmt.Errorf("%q: missing ]", s)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return Allowed{}, fmt.Errorf("%q: want [IPv6]:PORT", s)
		}
	} else if strings.Count(s, ":") == 1 {
		host, port, _ = strings.Cut(s, ":")
	}
	var a Allowed
	var err error
	if strings.Contains(host, "/") {
		a.Prefix, err = netip.ParsePrefix(host)
	} else {
		var ip netip.Addr
		if ip, err = netip.ParseAddr(host); err == nil && ip.Zone() != "" {
			err = errors.New("zone")
		} else if err == nil {
			a.Prefix = netip.PrefixFrom(ip, ip.BitLen())
		}
	}
	if err != nil || a.Prefix.Addr().Zone() != "" {
		return Allowed{}, fmt.Errorf("%q: want ADDR[/BITS][:PORT]", s)
	}
	a.Prefix = a.Prefix.Masked()
	if port != "" {
		var p int
		if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p < 1 || p > 65535 || fmt.Sprint(p) != port {
			return Allowed{}, fmt.Errorf("%q: the port must be 1-65535", s)
		}
		a.Port = uint16(p)
	}
	return a, nil
}

// refused4 and refused6 are the ranges no server reaches (unless
// allowed): those remote downloads refuse too (internal/netguard's
// table), and for IPv6 everything outside global unicast 2000::/3.
var (
	refused4 = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4"}
	refused6 = []string{"64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20"}
)

// TableName is the nftables table of the rules (inet family): one per
// range of users (kiln_servers_FIRST_LAST) or per bridge
// (kiln_bridge_NAME), so that two nodes on one host (tests) keep their
// own rules.
func (e Egress) TableName() string {
	if e.Bridge != "" {
		return "kiln_bridge_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '_'
		}, e.Bridge)
	}
	return fmt.Sprintf("kiln_servers_%d_%d", e.FirstUID, e.LastUID)
}

// Ruleset is the nft script that replaces the table with e's rules
// (nft -f applies it in one transaction: never a moment without rules).
// Answers to connections players opened (conntrack established) always
// pass. With Bridge empty only packets of sockets the servers' users own
// are judged (meta skuid), so Kiln's own traffic and the kernel's
// (replies without a socket) are never touched. With Bridge set, the
// packets coming in from it: to this host (input: its game ports, name
// servers and Allow entries only) and through it (forward: connections
// the host translated to a published port, ct status dnat, pass; then the
// same ranges as for users, and nothing to the bridge itself). Those
// chains run just before the filter priority (filter - 10), where
// Docker's iptables-nft chains sit: a packet must pass every base chain
// of its hook, so whatever Docker accepts, a reject here holds, and it
// comes first, at once, rather than after a silent drop of Docker's.
func (e Egress) Ruleset() string {
	var b strings.Builder
	t := e.TableName()
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\n", t, t) // delete needs it to exist
	fmt.Fprintf(&b, "table inet %s {\n", t)
	if e.Bridge != "" {
		br := strconv.Quote(e.Bridge)
		b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n")
		fmt.Fprintf(&b, "\t\tiifname %s jump host\n\t}\n", br)
		b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter - 10; policy accept;\n")
		fmt.Fprintf(&b, "\t\tiifname %s jump servers\n\t}\n", br)
		b.WriteString("\tchain host {\n")
		b.WriteString("\t\tct state established,related accept\n")
		fmt.Fprintf(&b, "\t\tmeta l4proto { tcp, udp } th dport %d-%d accept\n", e.Ports.First, e.Ports.Last)
		e.allowed(&b)
		b.WriteString("\t\treject with icmpx type admin-prohibited\n\t}\n")
		b.WriteString("\tchain servers {\n")
		b.WriteString("\t\tct state established,related accept\n")
		b.WriteString("\t\tct status dnat accept\n")
		fmt.Fprintf(&b, "\t\toifname %s reject with icmpx type admin-prohibited\n", br)
	} else {
		b.WriteString("\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n")
		fmt.Fprintf(&b, "\t\tmeta skuid %d-%d jump servers\n\t}\n", e.FirstUID, e.LastUID)
		b.WriteString("\tchain servers {\n")
		b.WriteString("\t\tct state established,related accept\n")
		fmt.Fprintf(&b, "\t\tfib daddr type local meta l4proto { tcp, udp } th dport %d-%d accept\n", e.Ports.First, e.Ports.Last)
	}
	e.allowed(&b)
	b.WriteString("\t\tfib daddr type local reject with icmpx type admin-prohibited\n")
	fmt.Fprintf(&b, "\t\tip daddr { %s } reject with icmpx type admin-prohibited\n", strings.Join(refused4, ", "))
	b.WriteString("\t\tip6 daddr != 2000::/3 reject with icmpx type admin-prohibited\n")
	fmt.Fprintf(&b, "\t\tip6 daddr { %s } reject with icmpx type admin-prohibited\n", strings.Join(refused6, ", "))
	b.WriteString("\t}\n}\n")
	return b.String()
}

// allowed writes the accept rules of the name servers and Allow entries.
func (e Egress) allowed(b *strings.Builder) {
	for _, r := range e.Resolvers {
		fmt.Fprintf(b, "\t\t%s daddr %s meta l4proto { tcp, udp } th dport 53 accept\n", family(r), r.Unmap())
	}
	for _, a := range e.Allow {
		fam := family(a.Prefix.Addr())
		if a.Port == 0 {
			fmt.Fprintf(b, "\t\t%s daddr %s accept\n", fam, a.Prefix)
		} else {
			fmt.Fprintf(b, "\t\t%s daddr %s meta l4proto { tcp, udp } th dport %d accept\n", fam, a.Prefix, a.Port)
		}
	}
}

func family(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "ip"
	}
	return "ip6"
}

// ErrNoNft: the nft command (Debian's nftables package) is missing.
var ErrNoNft = errors.New("the nft command is not installed (Debian: apt install nftables)")

// ApplyEgress loads e's rules into the kernel, replacing the table of its
// range. Errors: ErrNoNft, nft's own message.
func ApplyEgress(ctx context.Context, e Egress) error {
	return nft(ctx, e.Ruleset())
}

// RemoveEgress deletes the table of e's range, if any.
func RemoveEgress(ctx context.Context, e Egress) error {
	return nft(ctx, fmt.Sprintf("table inet %s\ndelete table inet %s\n", e.TableName(), e.TableName()))
}

func nft(ctx context.Context, script string) error {
	bin, err := exec.LookPath("nft")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nft", "/sbin/nft"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return ErrNoNft
	}
	cmd := exec.CommandContext(ctx, bin, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Resolvers reads the name servers of a resolv.conf (/etc/resolv.conf).
func Resolvers(path string) []netip.Addr {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip, err := netip.ParseAddr(f[1]); err == nil && ip.Zone() == "" && !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	return out
}
