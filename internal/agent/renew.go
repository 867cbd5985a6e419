package agent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
)

// errRenewed ends a session whose certificate was renewed: the next one
// connects with the new certificate at once.
var errRenewed = errors.New("the node's certificate was renewed")

// renewLoop renews the node's certificate when it is due
// (cluster.RenewDue: less than a third of its life left), checking at
// once and every Config.RenewCheck until ctx ends. A failed renewal is
// tried again at the next check; the certificate in use stays valid
// meanwhile.
func (a *agent) renewLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.RenewCheck)
	defer t.Stop()
	for {
		id, _ := a.current()
		leaf := id.cert.Leaf
		if cluster.RenewDue(leaf.NotBefore, leaf.NotAfter, a.cfg.Now()) {
			if err := a.renew(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("cannot renew this node's certificate; trying again later", "err", err,
					"expires", leaf.NotAfter.UTC().Format(time.RFC3339), "in", a.cfg.RenewCheck)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renew makes a new key, has the control plane sign a certificate for it
// (over mutual TLS with the current one) and makes the pair the node's:
// node.key.next, then node.pem.next, each written whole and synced, then
// renamed over node.key and node.pem (promoteNext). A kill at any point
// leaves either the current pair, or the new pair complete in the .next
// files (or half renamed), which the next start promotes
// (loadIdentity): the control plane accepts both certificates until it
// sees the new one. The session then ends so that the next one connects
// with the new certificate, which makes it the only one the control
// plane accepts (connections with the older are cut).
func (a *agent) renew(ctx context.Context) error {
	id, client := a.current()
	dir := a.cfg.DataDir
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("make a new key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, KeyNextFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id.name}}, key)
	if err != nil {
		return fmt.Errorf("make the certificate request: %w", err)
	}
	body, _ := json.Marshal(cluster.RenewRequest{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	data, err := post(rctx, client, a.cfg.ServerURL+cluster.PathRenew, body)
	if err != nil {
		return fmt.Errorf("ask the control plane: %w", err)
	}
	var rr cluster.RenewResponse
	if err := json.Unmarshal(data, &rr); err != nil {
		return fmt.Errorf("the control plane's answer: %w", err)
	}
	cert, err := cluster.ParseCertificatePEM([]byte(rr.Certificate))
	if err != nil {
		return fmt.Errorf("the certificate sent: %w", err)
	}
	if eq, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(cert.PublicKey) || cert.Subject.CommonName != id.name {
		return errors.New("the certificate sent is not of this node's new key and name")
	}
	if err := checkNodeCert(cert, id.ca); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, CertNextFile), []byte(rr.Certificate)); err != nil {
		return err
	}
	if err := promoteNext(dir); err != nil {
		return err
	}
	nid, err := loadIdentity(dir)
	if err != nil {
		return err
	}
	a.setIdentity(nid)
	_, serial := cluster.NodeOf(nid.cert.Leaf)
	a.log.Info("certificate renewed; reconnecting with it", "serial", serial, "expires", nid.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	select {
	case a.renewed <- struct{}{}:
	default:
	}
	return nil
}
