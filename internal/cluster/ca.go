package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// Lifetimes of what the CA signs, and how early a control plane's server
// certificate is made again (see doc.go).
const (
	CALifetime         = 10 * 365 * 24 * time.Hour
	NodeCertLifetime   = 365 * 24 * time.Hour
	ServerCertLifetime = 90 * 24 * time.Hour
	ServerCertRenew    = 30 * 24 * time.Hour
	// clockSkew backdates NotBefore, so a host whose clock is a little
	// behind the control plane's accepts a certificate made just now.
	clockSkew = time.Hour
)

// ServerName is the one DNS name in every control plane's server
// certificate, and the name agents verify (as Nomad verifies
// "server.<region>.nomad"): whatever address an agent dials (an IP, a
// NAT's, a load balancer's name), it checks that the certificate is the
// cluster CA's and names the control plane. Node certificates never carry
// it and are for client authentication only.
const ServerName = "control-plane.kiln.cluster"

// ErrCSR: a certificate request the CA does not sign (unreadable, a bad
// signature, or a key type other than ECDSA P-256/P-384 or Ed25519).
var ErrCSR = errors.New("certificate request refused")

// CA is the cluster's certificate authority: its certificate, and on the
// control plane its private key. An agent only ever holds the certificate
// (PinnedCA); nothing in this package sends the key anywhere.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// NewCA makes a CA: an ECDSA P-256 key and a self-signed certificate valid
// CALifetime from now. It returns the certificate (PEM) and the key
// (PKCS #8 DER, for the caller to seal).
func NewCA(now time.Time) (certPEM []byte, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Kiln cluster CA", Organization: []string{"Kiln"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("make the CA certificate: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyDER, nil
}

// LoadCA returns the CA of certPEM and keyDER (PKCS #8), checking that the
// key is the certificate's.
func LoadCA(certPEM, keyDER []byte) (*CA, error) {
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !publicKeyEqual(signer.Public(), cert.PublicKey) {
		return nil, errors.New("the CA key does not belong to the CA certificate")
	}
	if !cert.IsCA {
		return nil, errors.New("the CA certificate is not a CA's")
	}
	return &CA{cert: cert, key: signer}, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// Certificate is the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertificatePEM is the CA's certificate in PEM.
func (ca *CA) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// Fingerprint is the SHA-256 of the CA certificate's DER, in lower-case
// hex: what a join token carries (`openssl x509 -noout -fingerprint
// -sha256` shows the same bytes).
func (ca *CA) Fingerprint() string { return Fingerprint(ca.cert) }

// Fingerprint is the SHA-256 of a certificate's DER in lower-case hex.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// SignNode signs a node's certificate request: the subject is the node's
// name, the key the request's, the use client authentication only, valid
// NodeCertLifetime from now. Nothing else of the request is copied: the
// node asks for a key to be certified, the CA decides what it may do. It
// returns the certificate's DER and its serial (lower-case hex), by which
// the control plane knows the node's current certificate. Errors: ErrCSR
// (wrapped with the reason).
func (ca *CA) SignNode(csrDER []byte, name string, now time.Time) (der []byte, serial string, err error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", fmt.Errorf("%w: its signature: %v", ErrCSR, err)
	}
	if err := acceptableKey(csr.PublicKey); err != nil {
		return nil, "", err
	}
	sn, err := newSerial()
	if err != nil {
		return nil, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Kiln nodes"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(NodeCertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, "", fmt.Errorf("sign the node's certificate: %w", err)
	}
	return der, SerialHex(sn), nil
}

// acceptableKey admits the key types agents make (ECDSA P-256) and the
// other modern ones; RSA and small curves are refused.
func acceptableKey(k crypto.PublicKey) error {
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("%w: the key must be ECDSA P-256 or P-384, or Ed25519", ErrCSR)
}

// ServerCertificate makes a control plane's TLS certificate: a fresh
// ECDSA P-256 key, ServerName, server authentication only, valid
// ServerCertLifetime from now. The chain sent holds the CA's certificate
// after it, so an agent enrolling finds the CA it checks against its join
// token's fingerprint in the handshake itself.
func (ca *CA) ServerCertificate(now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the server key: %w", err)
	}
	sn, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: ServerName, Organization: []string{"Kiln control plane"}},
		DNSNames:     []string{ServerName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(ServerCertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign the server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// newSerial is a random 128-bit serial number (RFC 5280 asks for
// positive, at most 20 octets; randomness keeps serials unguessable).
func newSerial() (*big.Int, error) {
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("make a serial number: %w", err)
	}
	return sn.Add(sn, big.NewInt(1)), nil
}

// SerialHex is a certificate serial in lower-case hex, the form the
// control plane stores.
func SerialHex(sn *big.Int) string { return strings.ToLower(sn.Text(16)) }

// ParseCertificatePEM reads the first certificate of a PEM text.
func ParseCertificatePEM(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}
