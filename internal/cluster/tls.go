package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
)

// FingerprintError: the control plane an agent reached showed no
// certificate authority with the join token's fingerprint. The agent
// stops there: the token is never sent.
type FingerprintError struct {
	Want string   // the token's
	Got  []string // the fingerprints of the CA certificates shown
}

func (e *FingerprintError) Error() string {
	got := "none"
	if len(e.Got) > 0 {
		got = strings.Join(e.Got, ", ")
	}
	return fmt.Sprintf("the control plane's certificate authority is not the join token's (token: %s, shown: %s); the token was not sent", e.Want, got)
}

// EnrollTLS is the TLS configuration of an agent's enrollment, as k3s
// checks /cacerts against its token: the agent has no CA yet, so the
// chain is checked against the token's fingerprint instead: the control
// plane sends the CA's certificate after its own (CA.ServerCertificate);
// the one whose SHA-256 is the fingerprint becomes the only root, and the
// server's certificate must chain to it and name ServerName. This runs in
// the handshake, before a byte of the request (and so the token) is
// written; a mismatch fails it with *FingerprintError.
func EnrollTLS(fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard verification needs roots the agent does not have
		// yet; VerifyConnection does the whole check instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &FingerprintError{Want: fingerprint}
			}
			var ca *x509.Certificate
			var shown []string
			for _, c := range cs.PeerCertificates[1:] {
				if !c.IsCA {
					continue
				}
				fp := Fingerprint(c)
				shown = append(shown, fp)
				if fp == fingerprint {
					ca = c
				}
			}
			if ca == nil {
				return &FingerprintError{Want: fingerprint, Got: shown}
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: roots, DNSName: ServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}); err != nil {
				return fmt.Errorf("the control plane's certificate is not its CA's: %w", err)
			}
			return nil
		},
	}
}

// NodeTLS is the TLS configuration of an enrolled node: its certificate
// for the control plane to check, and the pinned CA as the only root for
// the control plane's (ServerName).
func NodeTLS(ca *x509.Certificate, cert tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      roots,
		ServerName:   ServerName,
		Certificates: []tls.Certificate{cert},
	}
}

// ServerTLS is the control plane's TLS configuration of the node
// endpoint: its certificate from getCert, and client certificates checked
// against the CA when one is shown. One is not required at the handshake,
// since enrollment has none; every other call refuses a request without
// one (the endpoint's handler), and the handler also checks that the
// certificate is its node's current one. It offers ChannelProto before
// the HTTP versions net/http adds: an agent dialing its channel offers
// that alone, its session and enrollment offer h2 and http/1.1.
func ServerTLS(ca *x509.Certificate, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: getCert,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      pool,
		NextProtos:     []string{ChannelProto},
	}
}

// NodeOf is the node a verified client certificate was issued to, and
// its serial.
func NodeOf(c *x509.Certificate) (name, serial string) {
	return c.Subject.CommonName, SerialHex(c.SerialNumber)
}
