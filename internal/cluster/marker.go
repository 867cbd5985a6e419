package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/kilnhq/kiln/internal/blob"
)

// maxMarker bounds what is read of a marker object.
const maxMarker = 4 << 10

// ReadMarker reads the marker object under key of st: the control plane
// when it starts, an agent to check that it sees the control plane's
// store. Errors: blob.ErrNotFound (wrapped) when there is none, the
// store's otherwise.
func ReadMarker(ctx context.Context, st blob.Store, key string) (BlobMarker, error) {
	r, err := st.Get(ctx, key)
	if err != nil {
		return BlobMarker{}, fmt.Errorf("read the blob store's marker: %w", err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(r, maxMarker)); err != nil {
		return BlobMarker{}, fmt.Errorf("read the blob store's marker: %w", err)
	}
	return BlobMarker{Key: key, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
