package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// BlockedError reports an address a download may not connect to. Callers
// match it with errors.AsType[*BlockedError]; the HTTP client returns it
// wrapped in a *url.Error (and, when the connect-time check refused, a
// *net.OpError).
type BlockedError struct {
	// Addr is the refused address: as written when the URL held an IP
	// literal, as the resolver answered (IPv4 unmapped) for a name, as
	// about to be connected for the connect-time check.
	Addr netip.Addr
	// Host is the name that resolved to Addr; empty for IP literals and
	// for the connect-time check.
	Host string
	// Reason names the refused range and what it is, e.g.
	// "127.0.0.0/8 (loopback, RFC 1122)".
	Reason string
}

func (e *BlockedError) Error() string {
	if e.Host != "" {
		return fmt.Sprintf("address %s of %q refused: %s", e.Addr, e.Host, e.Reason)
	}
	return fmt.Sprintf("address %s refused: %s", e.Addr, e.Reason)
}

// ParseAllowList parses the values of --pull-allow-cidr. Each must be a
// CIDR prefix without host bits ("10.0.0.0/8", "fd00::/8", "127.0.0.1/32");
// a bare address, a zone or host bits ("10.1.2.3/8") are refused so that
// an operator's typo does not allow more or less than meant.
func ParseAllowList(cidrs []string) ([]netip.Prefix, error) {
	allow := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "/") {
			return nil, fmt.Errorf("allow %q: not a CIDR prefix (write %s/32 or %s/128 for one address)", s, s, s)
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allow %q: %w", s, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("allow %q: host bits set, the prefix is %s", s, p.Masked())
		}
		allow = append(allow, p)
	}
	return allow, nil
}

// Resolver looks up a host name's addresses. *net.Resolver implements it;
// tests pass a table so that a name can resolve to a refused address
// without DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy decides which addresses downloads may connect to and builds the
// dialer and HTTP client that enforce it. It is safe for concurrent use.
type Policy struct {
	allow    []netip.Prefix
	resolver Resolver
	dialer   net.Dialer
}

// NewPolicy returns a Policy that refuses every address Blocked refuses
// except those inside an allow prefix. An allow prefix matches addresses
// of its own family as written: 127.0.0.1/32 allows 127.0.0.1, not
// ::ffff:127.0.0.1 nor 64:ff9b::7f00:1, and allows nothing outside
// itself. Invalid prefixes are ignored (ParseAllowList refuses them). r
// resolves host names; nil means net.DefaultResolver.
func NewPolicy(allow []netip.Prefix, r Resolver) *Policy {
	if r == nil {
		r = net.DefaultResolver
	}
	p := &Policy{resolver: r}
	for _, a := range allow {
		if a.IsValid() {
			p.allow = append(p.allow, a.Masked())
		}
	}
	p.dialer = net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control:   p.control,
	}
	return p
}

// Check returns nil if ip is allowed and a *BlockedError if it is not.
func (p *Policy) Check(ip netip.Addr) error {
	if e := p.check(ip); e != nil {
		return e
	}
	return nil
}

func (p *Policy) check(ip netip.Addr) *BlockedError {
	for _, a := range p.allow {
		// Contains is false across families and for zoned addresses.
		if a.Contains(ip) {
			return nil
		}
	}
	if reason, blocked := Blocked(ip); blocked {
		return &BlockedError{Addr: ip, Reason: reason}
	}
	return nil
}
