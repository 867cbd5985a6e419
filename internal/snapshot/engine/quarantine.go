package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// QuarantinePrefix is where QuarantineChunk moves a corrupt chunk: out of
// the chunks/ namespace, so that a look-up no longer finds it and the
// next snapshot holding its data stores it again, and out of the
// collector's way (it lists chunks/ and manifests/ only). What is there
// is kept for the operator to look at, and to delete.
const QuarantinePrefix = "quarantine/"

// QuarantineStore is what QuarantineChunk needs of a blob store.
type QuarantineStore interface {
	Store
	Delete(ctx context.Context, key string) error
}

// QuarantineKey is where a chunk stored under key is moved when it is set
// aside at at: QuarantinePrefix, key, and the time in Unix ms (a chunk
// set aside twice, corrupt again after it was stored again, keeps both
// copies).
func QuarantineKey(key string, at time.Time) string {
	return QuarantinePrefix + key + "." + strconv.FormatInt(at.UnixMilli(), 10)
}

// QuarantineChunk reads the chunk ref, stored under key (its
// manifest.ChunkKey: a ChunkError's Key and Ref), again and, if it is
// still corrupt, moves it out of the chunk namespace: a copy of its
// stored bytes to QuarantineKey(key, at), then the chunk deleted. It
// returns the key it was moved to, "" when it was not moved: the chunk
// is whole now (stored again, or read wrong the first time), or gone.
//
// The caller must hold the chunk (internal/snapshot's ledger claims it)
// so that no one else moves or deletes it meanwhile: then between the
// read and the delete no other copy can take its place (a Put never
// replaces a blob), and the delete removes the bytes found corrupt. A
// failure after the copy leaves the chunk where it was (and the copy).
func QuarantineChunk(ctx context.Context, st QuarantineStore, key string, ref manifest.ChunkRef, at time.Time) (string, error) {
	if !strings.HasPrefix(key, "chunks/") {
		return "", fmt.Errorf("quarantine chunk %s: not a chunk's key", key)
	}
	var comp []byte
	err := readChunk(ctx, st, key, &comp)
	if errors.Is(err, blob.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("quarantine chunk %s: %w", key, err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(2*MaxChunk))
	if err != nil {
		return "", fmt.Errorf("quarantine chunk %s: decoder: %w", key, err)
	}
	defer dec.Close()
	if _, err := checkChunk(dec, key, ref, comp, nil); err == nil {
		return "", nil
	}
	to := QuarantineKey(key, at)
	if _, err := st.Put(ctx, to, blob.Checked(bytes.NewReader(comp), blob.CRC32C(comp)), int64(len(comp))); err != nil {
		return "", fmt.Errorf("quarantine chunk %s: copy it to %s: %w", key, to, err)
	}
	if err := st.Delete(ctx, key); err != nil {
		return "", fmt.Errorf("quarantine chunk %s: delete it (copied to %s): %w", key, to, err)
	}
	return to, nil
}
