package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
)

// newCA makes a cluster CA for a test.
func newCA(t *testing.T) *cluster.CA {
	t.Helper()
	certPEM, keyDER, err := cluster.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cluster.LoadCA(certPEM, keyDER)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// nodeIdentity is an identity of node name signed by ca.
func nodeIdentity(t *testing.T, ca *cluster.CA, name string) identity {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	der, _, err := ca.SignNode(csr, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return identity{name: name, ca: ca.Certificate(), cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}
}

// controlPlane listens like a control plane's node endpoint with ca's
// server certificate, offering the channel's protocol; each handshake's
// result is sent on the returned channel.
func controlPlane(t *testing.T, ca *cluster.CA) (addr string, handshakes chan error) {
	t.Helper()
	cert, err := ca.ServerCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cluster.ServerTLS(ca.Certificate(), func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }))
	if err != nil {
		t.Fatal(err)
	}
	handshakes = make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handshakes <- c.(*tls.Conn).Handshake()
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), handshakes
}

// TestChannelDialsPinnedCA: the agent dials its channel — on which it
// answers whoever holds the other end — only to a control plane whose
// certificate its pinned CA signed for the control plane's name
// (cluster.NodeChannelTLS): another CA's server, though it offers the
// channel's protocol, fails the handshake, and the channel's ALPN
// protocol is negotiated with the right one.
func TestChannelDialsPinnedCA(t *testing.T) {
	ca := newCA(t)
	id := nodeIdentity(t, ca, "edge-1")

	addr, handshakes := controlPlane(t, newCA(t))
	a := &agent{cfg: Config{ServerURL: "https://" + addr}, id: id}
	c, err := a.dialChannel(t.Context())
	if err == nil {
		c.Close()
		t.Fatal("dialChannel to a control plane of another CA succeeded")
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
		t.Errorf("dialChannel to another CA's control plane = %v, want x509.UnknownAuthorityError", err)
	}
	if err := <-handshakes; err == nil {
		t.Error("the impostor's handshake succeeded")
	}

	addr, handshakes = controlPlane(t, ca)
	a = &agent{cfg: Config{ServerURL: "https://" + addr}, id: id}
	c, err = a.dialChannel(t.Context())
	if err != nil {
		t.Fatalf("dialChannel to the pinned CA's control plane = %v", err)
	}
	defer c.Close()
	if err := <-handshakes; err != nil {
		t.Errorf("the control plane's handshake = %v", err)
	}
	st := c.(*tls.Conn).ConnectionState()
	if st.NegotiatedProtocol != cluster.ChannelProto || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != cluster.ServerName {
		t.Errorf("channel: ALPN %q, peer %v; want %q and the control plane's certificate", st.NegotiatedProtocol, st.PeerCertificates, cluster.ChannelProto)
	}
}
