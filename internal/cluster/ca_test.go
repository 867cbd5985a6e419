package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	certPEM, keyDER, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPEM, keyDER)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func csrOf(t *testing.T, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func p256(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCAFingerprint(t *testing.T) {
	ca := newCA(t)
	if fp := ca.Fingerprint(); len(fp) != 64 || !isLowerHex(fp) {
		t.Errorf("Fingerprint = %q, want 64 lower-case hex", fp)
	}
	if c := ca.Certificate(); !c.IsCA || !c.MaxPathLenZero || c.NotAfter.Sub(c.NotBefore) < CALifetime {
		t.Errorf("CA certificate: IsCA %v, MaxPathLenZero %v, valid %s", c.IsCA, c.MaxPathLenZero, c.NotAfter.Sub(c.NotBefore))
	}
	other := newCA(t)
	if other.Fingerprint() == ca.Fingerprint() {
		t.Error("two CAs share a fingerprint")
	}
	// A key that is not the certificate's is refused.
	certPEM, _, _ := NewCA(time.Now())
	_, keyDER, _ := NewCA(time.Now())
	if _, err := LoadCA(certPEM, keyDER); err == nil {
		t.Error("LoadCA accepted a key of another certificate")
	}
}

// TestSignNodeTakesOnlyTheKey: whatever a request asks for (another
// name, the control plane's DNS name, server authentication, being a
// CA), the certificate names the node the token was for, is for client
// authentication only, and cannot pass for the control plane.
func TestSignNodeTakesOnlyTheKey(t *testing.T) {
	ca := newCA(t)
	key := p256(t)
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 1}}) // serverAuth
	bc, _ := asn1.Marshal(struct{ IsCA bool }{true})
	csr := csrOf(t, key, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "control-plane"},
		DNSNames: []string{ServerName},
		ExtraExtensions: []pkix.Extension{
			{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Value: eku},
			{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc},
		},
	})
	now := time.Now()
	der, serial, err := ca.SignNode(csr, "edge-1", now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if name, sn := NodeOf(c); name != "edge-1" || sn != serial {
		t.Errorf("NodeOf = %q, %q; want edge-1, %q", name, sn, serial)
	}
	if c.IsCA || len(c.DNSNames) != 0 || !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(c.ExtraExtensions) != 0 {
		t.Errorf("certificate: IsCA %v, DNS %v, EKU %v: want a client certificate only", c.IsCA, c.DNSNames, c.ExtKeyUsage)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		t.Error("the certificate is not of the request's key")
	}
	if got := c.NotAfter.Sub(now); got < NodeCertLifetime-time.Second || got > NodeCertLifetime+time.Second {
		t.Errorf("valid for %s after now, want %s", got, NodeCertLifetime)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("as a client certificate: %v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: ServerName}); err == nil {
		t.Error("a node certificate passes for the control plane's")
	}
}

func TestSignNodeRefuses(t *testing.T) {
	ca := newCA(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := csrOf(t, p256(t), &x509.CertificateRequest{})
	tampered := slices.Clone(good)
	tampered[len(tampered)-5] ^= 0xff // in the signature
	for name, csr := range map[string][]byte{
		"rsa":       csrOf(t, rsaKey, &x509.CertificateRequest{}),
		"garbage":   []byte("not a request"),
		"signature": tampered,
	} {
		if _, _, err := ca.SignNode(csr, "n1", time.Now()); !errors.Is(err, ErrCSR) {
			t.Errorf("%s: SignNode = %v, want ErrCSR", name, err)
		}
	}
}

// handshake runs one TLS handshake over loopback between a server
// showing cert and a client of cfg; it returns how many bytes of
// application data the server read and the client's error.
func handshake(t *testing.T, cert *tls.Certificate, clientCA *x509.Certificate, cfg *tls.Config) (int, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- -1
			return
		}
		defer c.Close()
		s := tls.Server(c, ServerTLS(clientCA, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(s)
		read <- len(b)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, cfg)
	herr := tc.Handshake()
	if herr == nil {
		tc.Write([]byte("token"))
	}
	tc.Close()
	return <-read, herr
}

// TestEnrollTLS: an agent enrolling talks only to a control plane whose
// chain holds the CA of the token's fingerprint and whose certificate
// that CA signed: another cluster's control plane, or a server that
// shows the real (public) CA certificate beside a certificate of its
// own, fails the handshake before a byte (the token) is written.
func TestEnrollTLS(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	good, err := ca.ServerCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := handshake(t, good, ca.Certificate(), EnrollTLS(ca.Fingerprint())); err != nil || n != len("token") {
		t.Fatalf("the real control plane: handshake %v, server read %d bytes", err, n)
	}
	foreign, _ := other.ServerCertificate(time.Now())
	impostor := &tls.Certificate{Certificate: [][]byte{foreign.Certificate[0], ca.Certificate().Raw}, PrivateKey: foreign.PrivateKey}
	noCA := &tls.Certificate{Certificate: good.Certificate[:1], PrivateKey: good.PrivateKey}
	for name, c := range map[string]*tls.Certificate{"another cluster": foreign, "impostor": impostor, "no CA in the chain": noCA} {
		n, err := handshake(t, c, ca.Certificate(), EnrollTLS(ca.Fingerprint()))
		if err == nil || n != 0 {
			t.Errorf("%s: handshake %v, server read %d bytes; want a failed handshake, nothing sent", name, err, n)
		}
		if _, ok := errors.AsType[*FingerprintError](err); name != "impostor" && !ok {
			t.Errorf("%s: %v, want *FingerprintError", name, err)
		}
	}
}

// TestNodeTLS: an enrolled node and the control plane authenticate each
// other; a node certificate of another CA is refused by the control
// plane, and a control plane of another CA by the node.
func TestNodeTLS(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	server, _ := ca.ServerCertificate(time.Now())
	nodeCert := func(ca *CA) tls.Certificate {
		key := p256(t)
		der, _, err := ca.SignNode(csrOf(t, key, &x509.CertificateRequest{}), "n1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	if n, err := handshake(t, server, ca.Certificate(), NodeTLS(ca.Certificate(), nodeCert(ca))); err != nil || n != len("token") {
		t.Fatalf("member: handshake %v, server read %d", err, n)
	}
	if n, _ := handshake(t, server, ca.Certificate(), NodeTLS(ca.Certificate(), nodeCert(other))); n != 0 {
		t.Errorf("a node certificate of another CA: the server read %d bytes", n)
	}
	otherServer, _ := other.ServerCertificate(time.Now())
	if n, err := handshake(t, otherServer, ca.Certificate(), NodeTLS(ca.Certificate(), nodeCert(ca))); err == nil || n != 0 {
		t.Errorf("a control plane of another CA: handshake %v, server read %d", err, n)
	}
}
