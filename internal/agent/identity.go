package agent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kilnhq/kiln/internal/cluster"
)

// Files of the node's identity in the data dir.
const (
	CAFile   = "ca.pem"   // the cluster CA's certificate, pinned at enrollment
	KeyFile  = "node.key" // the node's private key (PKCS #8), made here, never sent
	CertFile = "node.pem" // the node's certificate; its presence means enrolled
)

// identity is an enrolled node's key, certificate and pinned CA.
type identity struct {
	name string
	ca   *x509.Certificate
	cert tls.Certificate
}

// errNotEnrolled: the data dir holds no certificate yet.
var errNotEnrolled = errors.New("not enrolled")

// loadIdentity reads the identity of dir, checking that it holds
// together: the certificate is of the key and chains to the pinned CA.
// Errors: errNotEnrolled when there is no certificate.
func loadIdentity(dir string) (identity, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if errors.Is(err, os.ErrNotExist) {
		return identity{}, errNotEnrolled
	}
	if err != nil {
		return identity{}, fmt.Errorf("read the node's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return identity{}, fmt.Errorf("read the pinned CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return identity{}, fmt.Errorf("read the node's key: %w", err)
	}
	ca, err := cluster.ParseCertificatePEM(caPEM)
	if err != nil {
		return identity{}, fmt.Errorf("%s: %w", filepath.Join(dir, CAFile), err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return identity{}, fmt.Errorf("the node's certificate and key in %s do not hold together: %w", dir, err)
	}
	if err := checkNodeCert(cert.Leaf, ca); err != nil {
		return identity{}, fmt.Errorf("%s: %w", filepath.Join(dir, CertFile), err)
	}
	return identity{name: cert.Leaf.Subject.CommonName, ca: ca, cert: cert}, nil
}

// checkNodeCert checks that c is a client certificate of ca (expiry
// aside: an expired one is for the control plane to refuse, with a
// sentence the operator reads).
func checkNodeCert(c, ca *x509.Certificate) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: c.NotBefore.Add(1)})
	if err != nil {
		return fmt.Errorf("not a node certificate of the pinned CA: %w", err)
	}
	return nil
}

// nodeKey returns the node's key, made (ECDSA P-256) and written to dir
// first when there is none. A key left by an enrollment that a crash cut
// short is used again: the control plane gives the key that used a join
// token its certificate again.
func nodeKey(dir string) (crypto.Signer, error) {
	path := filepath.Join(dir, KeyFile)
	data, err := os.ReadFile(path)
	if err == nil {
		b, _ := pem.Decode(data)
		if b == nil || b.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%s holds no PEM private key", path)
		}
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s: not a signing key", path)
		}
		return s, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the node's key: %w", err)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the node's key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	return k, nil
}

// writeFile writes data to path, readable by the owner only, whole or
// not at all: a temporary file, synced, renamed over path, the directory
// synced.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	return nil
}
