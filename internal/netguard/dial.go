package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// DialContext connects to address ("host:port", port numeric) over TCP
// ("tcp", "tcp4" or "tcp6"), only ever to an allowed address.
//
// An IP literal is checked as written. A name is resolved once through the
// Policy's Resolver and every answer is checked; the allowed ones are tried
// in order, each as an IP literal, so nothing is resolved again. Then the
// dialer's Control hook checks the address the socket is about to connect
// to, after socket(2) and before connect(2), so no byte leaves for a
// refused address whatever the resolver did.
//
// It returns a *BlockedError when every address was refused, and the
// connection errors (joined) when every allowed address failed; refused
// answers of a name with an allowed one are skipped silently.
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var lookup string
	switch network {
	case "tcp":
		lookup = "ip"
	case "tcp4":
		lookup = "ip4"
	case "tcp6":
		lookup = "ip6"
	default:
		return nil, fmt.Errorf("dial %s %s: only tcp is supported", network, address)
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: port %q is not a number", address, portText)
	}
	addrs, name, err := p.resolve(ctx, lookup, host)
	if err != nil {
		return nil, err
	}
	var refused *BlockedError
	var errs []error
	for _, ip := range addrs {
		if e := p.check(ip); e != nil {
			e.Host = name
			if refused == nil {
				refused = e
			}
			continue
		}
		conn, err := p.dialer.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, refused
	}
	return nil, errors.Join(errs...)
}

// resolve returns host's addresses: the literal itself (and name ""), or
// the resolver's answers with IPv4 unmapped (and name host). net.Resolver.LookupNetIP returns IPv4
// answers as ::ffff:a.b.c.d (it converts 16-byte net.IPs), which no IPv4
// allow prefix matches; the connection goes to the IPv4 address either way.
func (p *Policy) resolve(ctx context.Context, lookup, host string) (addrs []netip.Addr, name string, err error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, "", nil
	}
	if host == "" {
		return nil, "", errors.New("dial: empty host")
	}
	answers, err := p.resolver.LookupNetIP(ctx, lookup, host)
	if err != nil {
		return nil, host, fmt.Errorf("resolve %q: %w", host, err)
	}
	if len(answers) == 0 {
		return nil, host, fmt.Errorf("resolve %q: no addresses", host)
	}
	addrs = make([]netip.Addr, len(answers))
	for i, a := range answers {
		addrs[i] = a.Unmap()
	}
	return addrs, host, nil
}

// control is the dialer's Control hook: it runs on every socket after
// socket(2) and before connect(2), with the address connect will be given.
// This is the check that counts; the one in DialContext only makes errors
// clearer and skips refused answers.
func (p *Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &BlockedError{Reason: fmt.Sprintf("connect address %q cannot be checked", address)}
	}
	if e := p.check(ap.Addr()); e != nil {
		return e
	}
	return nil
}
