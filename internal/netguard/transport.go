package netguard

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"
)

// MaxRedirects is how many redirects a download follows (api.md §4).
const MaxRedirects = 5

var (
	// ErrTooManyRedirects is returned when a response would be
	// redirect number MaxRedirects+1.
	ErrTooManyRedirects = fmt.Errorf("more than %d redirects", MaxRedirects)
	// ErrUnsupportedScheme is returned (wrapped) for a redirect to a URL
	// that is not http or https.
	ErrUnsupportedScheme = errors.New("only http and https are allowed")
)

// Transport returns a new *http.Transport that connects only through
// p.DialContext and never through a proxy. From base (nil: the settings of
// http.DefaultTransport) it takes only the TLS configuration (cloned),
// timeouts, connection-pool limits, buffer sizes and protocol settings;
// base's Proxy, proxy headers, Dial* functions and protocols registered
// with RegisterProtocol are never carried over, so nothing can open a
// connection that has not been checked. Do not register protocols on the
// result or set its Proxy or Dial* fields.
func (p *Policy) Transport(base *http.Transport) *http.Transport {
	if base == nil {
		base = &http.Transport{
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: 1 * time.Second,
		}
	}
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            p.DialContext,
		TLSClientConfig:        base.TLSClientConfig.Clone(),
		TLSHandshakeTimeout:    base.TLSHandshakeTimeout,
		DisableKeepAlives:      base.DisableKeepAlives,
		DisableCompression:     base.DisableCompression,
		MaxIdleConns:           base.MaxIdleConns,
		MaxIdleConnsPerHost:    base.MaxIdleConnsPerHost,
		MaxConnsPerHost:        base.MaxConnsPerHost,
		IdleConnTimeout:        base.IdleConnTimeout,
		ResponseHeaderTimeout:  base.ResponseHeaderTimeout,
		ExpectContinueTimeout:  base.ExpectContinueTimeout,
		TLSNextProto:           maps.Clone(base.TLSNextProto),
		MaxResponseHeaderBytes: base.MaxResponseHeaderBytes,
		WriteBufferSize:        base.WriteBufferSize,
		ReadBufferSize:         base.ReadBufferSize,
		ForceAttemptHTTP2:      base.ForceAttemptHTTP2,
	}
	if base.HTTP2 != nil {
		h2 := *base.HTTP2
		t.HTTP2 = &h2
	}
	if base.Protocols != nil {
		protocols := *base.Protocols
		t.Protocols = &protocols
	}
	return t
}

// Client returns an *http.Client for downloads: p.Transport(base) and
// CheckRedirect. It has no overall timeout; bound a download with its
// request's context.
func (p *Policy) Client(base *http.Transport) *http.Client {
	return &http.Client{Transport: p.Transport(base), CheckRedirect: CheckRedirect}
}

// CheckRedirect is an http.Client CheckRedirect for downloads: it follows
// at most MaxRedirects redirects, to http and https URLs only, and returns
// ErrTooManyRedirects or ErrUnsupportedScheme (wrapped) otherwise; the
// client wraps them in a *url.Error naming the target. The
// address of every redirect target is checked when it is dialed, not here.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return ErrTooManyRedirects
	}
	switch req.URL.Scheme {
	case "http", "https":
		return nil
	}
	return fmt.Errorf("redirect to scheme %q: %w", req.URL.Scheme, ErrUnsupportedScheme)
}
