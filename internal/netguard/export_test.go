package netguard

import (
	"context"
	"net"
)

// DialUnchecked dials address with the Policy's dialer but without the
// check in DialContext, so that tests reach the Control hook alone.
func (p *Policy) DialUnchecked(ctx context.Context, network, address string) (net.Conn, error) {
	return p.dialer.DialContext(ctx, network, address)
}
