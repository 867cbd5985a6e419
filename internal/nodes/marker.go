package nodes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/cluster"
)

// WriteMarker returns the cluster's blob store marker
// (cluster.MarkerKey), writing it first when st has none: 64 random hex
// characters, put if absent, so control planes sharing a store (or
// starting at once) keep one marker. Agents are told it in their
// Welcome and prove with it that they see this store.
func WriteMarker(ctx context.Context, st blob.Store) (cluster.BlobMarker, error) {
	for range 2 {
		m, err := cluster.ReadMarker(ctx, st, cluster.MarkerKey)
		if !errors.Is(err, blob.ErrNotFound) {
			return m, err
		}
		var b [32]byte
		_, _ = rand.Read(b[:])
		text := hex.EncodeToString(b[:]) + "\n"
		if _, err := st.Put(ctx, cluster.MarkerKey, strings.NewReader(text), int64(len(text))); err != nil {
			return cluster.BlobMarker{}, fmt.Errorf("write the blob store's marker: %w", err)
		}
		// Put if absent: read what is there, ours or another's.
	}
	return cluster.BlobMarker{}, errors.New("write the blob store's marker: it vanished as it was written")
}
