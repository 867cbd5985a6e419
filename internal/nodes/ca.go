package nodes

import (
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/store"
)

// Sealer seals the CA's private key (internal/secretbox.Box).
type Sealer interface {
	Seal(plaintext []byte) (string, error)
	Open(sealed string) ([]byte, error)
}

// ErrNoCA: the database has no cluster CA yet (kiln serve makes it at
// its first start).
var ErrNoCA = errors.New("the cluster has no certificate authority yet: start kiln serve (of this version) once, it makes one")

// LoadCA returns the cluster's CA with its key, making it first when the
// database has none (EnsureCA). A CA whose key the box cannot open
// (another --secret-key) is an error naming that.
func LoadCA(ctx context.Context, db *store.DB, box Sealer, now time.Time) (*cluster.CA, error) {
	if _, err := EnsureCA(ctx, db, box, now); err != nil {
		return nil, err
	}
	certPEM, sealed, err := readCA(ctx, db)
	if err != nil {
		return nil, err
	}
	keyDER, err := box.Open(sealed)
	if err != nil {
		return nil, fmt.Errorf("open the cluster CA's key (was kiln serve given another --secret-key than the one it was made with?): %w", err)
	}
	return cluster.LoadCA([]byte(certPEM), keyDER)
}

// EnsureCA makes the cluster's CA when the database has none (kiln
// serve, at every start) and returns its certificate; it does not open
// the key, which only a control plane serving the node endpoint needs (a
// replica started with another secret key runs on, as before clusters).
// Replicas starting at once on one PostgreSQL make one: the first insert
// wins and every replica reads that row.
func EnsureCA(ctx context.Context, db *store.DB, box Sealer, now time.Time) (*x509.Certificate, error) {
	c, err := CACertificate(ctx, db)
	if !errors.Is(err, ErrNoCA) {
		return c, err
	}
	cp, keyDER, err := cluster.NewCA(now)
	if err != nil {
		return nil, err
	}
	s, err := box.Seal(keyDER)
	if err != nil {
		return nil, fmt.Errorf("seal the CA key: %w", err)
	}
	if _, err := db.Write().ExecContext(ctx, `INSERT INTO cluster_ca (id, cert_pem, key_sealed, created_at) VALUES (1, $1, $2, $3)
ON CONFLICT (id) DO NOTHING`, string(cp), s, now.UnixMilli()); err != nil {
		return nil, fmt.Errorf("store the cluster CA: %w", err)
	}
	return CACertificate(ctx, db)
}

// CACertificate returns the cluster CA's certificate, without its key
// (kiln admin node add needs only its fingerprint). Errors: ErrNoCA.
func CACertificate(ctx context.Context, db *store.DB) (*x509.Certificate, error) {
	certPEM, _, err := readCA(ctx, db)
	if err != nil {
		return nil, err
	}
	return cluster.ParseCertificatePEM([]byte(certPEM))
}

func readCA(ctx context.Context, db *store.DB) (certPEM, sealed string, err error) {
	err = db.Read().QueryRowContext(ctx, `SELECT cert_pem, key_sealed FROM cluster_ca WHERE id = 1`).Scan(&certPEM, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", ErrNoCA
	}
	if err != nil {
		return "", "", fmt.Errorf("read the cluster CA: %w", err)
	}
	return certPEM, sealed, nil
}
