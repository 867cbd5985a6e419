package agent

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kilnhq/kiln/internal/cluster"
)

// pems is an identity's key and certificate in PEM, as the data dir
// keeps them.
func pems(t *testing.T, id identity) (key, cert []byte) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(id.cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: id.cert.Certificate[0]})
}

func serialOf(id identity) string {
	_, s := cluster.NodeOf(id.cert.Leaf)
	return s
}

// TestPromoteNext: every state a kill can leave a renewal in on disk
// (renew writes node.key.next, then node.pem.next, then renames the key,
// then the certificate) starts as one whole pair: the new one once its
// certificate is written, the current one before; leftovers that are no
// renewal of this node from its CA are removed.
func TestPromoteNext(t *testing.T) {
	ca := newCA(t)
	cur := nodeIdentity(t, ca, "edge-1")
	next := nodeIdentity(t, ca, "edge-1")
	curKey, curCert := pems(t, cur)
	nextKey, nextCert := pems(t, next)
	_, foreignCert := pems(t, nodeIdentity(t, newCA(t), "edge-1")) // another CA's
	otherNode := nodeIdentity(t, ca, "edge-2")
	otherKey, otherCert := pems(t, otherNode)
	_, strayCert := pems(t, nodeIdentity(t, ca, "edge-1")) // of a key not on disk

	for _, tc := range []struct {
		name  string
		files map[string][]byte // besides ca.pem
		want  identity
	}{
		{"no renewal", map[string][]byte{KeyFile: curKey, CertFile: curCert}, cur},
		{"killed after the new key", map[string][]byte{KeyFile: curKey, CertFile: curCert, KeyNextFile: nextKey}, cur},
		{"killed after the new certificate", map[string][]byte{KeyFile: curKey, CertFile: curCert, KeyNextFile: nextKey, CertNextFile: nextCert}, next},
		{"killed between the renames", map[string][]byte{KeyFile: nextKey, CertFile: curCert, CertNextFile: nextCert}, next},
		{"a certificate of another CA", map[string][]byte{KeyFile: curKey, CertFile: curCert, KeyNextFile: nextKey, CertNextFile: foreignCert}, cur},
		{"a certificate of another node", map[string][]byte{KeyFile: curKey, CertFile: curCert, KeyNextFile: otherKey, CertNextFile: otherCert}, cur},
		{"a certificate of another key", map[string][]byte{KeyFile: curKey, CertFile: curCert, KeyNextFile: nextKey, CertNextFile: strayCert}, cur},
		{"a certificate alone, not of the key", map[string][]byte{KeyFile: curKey, CertFile: curCert, CertNextFile: strayCert}, cur},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string][]byte{CAFile: ca.CertificatePEM()}
			for k, v := range tc.files {
				files[k] = v
			}
			for name, data := range files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			id, err := loadIdentity(dir)
			if err != nil {
				t.Fatalf("loadIdentity = %v", err)
			}
			if serialOf(id) != serialOf(tc.want) || id.name != "edge-1" {
				t.Errorf("loadIdentity = %s %s, want %s", id.name, serialOf(id), serialOf(tc.want))
			}
			ents, _ := os.ReadDir(dir)
			var left []string
			for _, e := range ents {
				left = append(left, e.Name())
			}
			if want := []string{CAFile, KeyFile, CertFile}; !slices.Equal(left, want) {
				t.Errorf("files left = %v, want %v", left, want)
			}
			// Starting again changes nothing.
			again, err := loadIdentity(dir)
			if err != nil || serialOf(again) != serialOf(tc.want) {
				t.Errorf("loadIdentity again = %v, %v", again.name, err)
			}
		})
	}
}
