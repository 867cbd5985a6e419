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
	// KeyNextFile and CertNextFile are a renewal's new key and
	// certificate until they are renamed over KeyFile and CertFile.
	KeyNextFile  = "node.key.next"
	CertNextFile = "node.pem.next"
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
// A renewal a kill cut short is finished or undone first (promoteNext).
// Errors: errNotEnrolled when there is no certificate.
func loadIdentity(dir string) (identity, error) {
	if err := promoteNext(dir); err != nil {
		return identity{}, err
	}
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

// promoteNext makes a renewal's new pair the node's: node.key.next over
// node.key, then node.pem.next over node.pem, the directory synced. It
// also finishes a promotion a kill cut short, at start: a complete new
// pair (node.pem.next of node.key.next) is promoted; node.pem.next of
// node.key (killed between the two renames) is renamed; a new key
// without its certificate (the control plane's answer never written)
// is removed, as is a node.pem.next that is no certificate of this
// node's from the pinned CA for the key beside it. Either way the node
// is left one whole pair: the current one, which the control plane
// accepts until it sees the new one, or the new one, which it accepts
// from its signature on.
func promoteNext(dir string) error {
	keyNext, certNext := filepath.Join(dir, KeyNextFile), filepath.Join(dir, CertNextFile)
	certPEM, err := os.ReadFile(certNext)
	if errors.Is(err, os.ErrNotExist) {
		return removeAll(dir, keyNext)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", certNext, err)
	}
	keyPEM, err := os.ReadFile(keyNext)
	keyMoved := errors.Is(err, os.ErrNotExist)
	if keyMoved {
		keyPEM, err = os.ReadFile(filepath.Join(dir, KeyFile))
	}
	if err != nil {
		return fmt.Errorf("read the node's new key: %w", err)
	}
	if !renewalOf(dir, certPEM, keyPEM) {
		return removeAll(dir, keyNext, certNext)
	}
	if !keyMoved {
		if err := os.Rename(keyNext, filepath.Join(dir, KeyFile)); err != nil {
			return fmt.Errorf("promote the node's new key: %w", err)
		}
	}
	if err := os.Rename(certNext, filepath.Join(dir, CertFile)); err != nil {
		return fmt.Errorf("promote the node's new certificate: %w", err)
	}
	return syncDir(dir)
}

// renewalOf says whether certPEM and keyPEM are a pair, the certificate
// a node certificate of the pinned CA for the node named in node.pem.
func renewalOf(dir string, certPEM, keyPEM []byte) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return false
	}
	ca, err := cluster.ParseCertificatePEM(caPEM)
	if err != nil || checkNodeCert(pair.Leaf, ca) != nil {
		return false
	}
	curPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return false
	}
	cur, err := cluster.ParseCertificatePEM(curPEM)
	return err == nil && cur.Subject.CommonName == pair.Leaf.Subject.CommonName
}

// removeAll removes paths (missing ones are no error) and syncs dir.
func removeAll(dir string, paths ...string) error {
	removed := false
	for _, p := range paths {
		err := os.Remove(p)
		if err == nil {
			removed = true
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	if !removed {
		return nil
	}
	return syncDir(dir)
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
	return syncDir(filepath.Dir(path))
}

// syncDir makes the renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
