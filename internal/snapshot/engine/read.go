package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// What reads a stored snapshot back — its manifest and its chunks — for
// Export here, for internal/snapshot/restore and for the collector.

// ErrCorruptChunk is a stored chunk whose content is not what its name
// says (its SHA-256 or its length differ, or it does not decompress): the
// restore stops before anything is swapped in.
var ErrCorruptChunk = errors.New("snapshot chunk is corrupt")

// OnPath says whether the entry at rel takes part in a restore or an
// export narrowed to only: rel is only or under it, or (lead) a
// directory leading to it.
func OnPath(only, rel string) (under, lead bool) {
	if only == "" || only == "." || rel == only {
		return true, false
	}
	if len(rel) > len(only) && rel[len(only)] == '/' && rel[:len(only)] == only {
		return true, false
	}
	return false, len(only) > len(rel) && only[len(rel)] == '/' && only[:len(rel)] == rel
}

// Scan reads the manifest under key, checking every entry
// (manifest.Read) and handing it to fn, and returns its totals once its
// end was checked.
func Scan(ctx context.Context, store Store, key string, fn func(*manifest.Entry) error) (manifest.Info, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return manifest.Info{}, fmt.Errorf("read manifest: %w", err)
	}
	defer rc.Close()
	return manifest.Read(ctx, rc, fn)
}

// ChunkKeys returns the keys of the chunks the manifest under key
// references, in manifest order, each once (what a collector must keep
// for it). Errors: manifest.ErrInvalid, the store's errors.
func ChunkKeys(ctx context.Context, store Store, key string) ([]string, error) {
	seen := make(map[[32]byte]struct{})
	var sums [][32]byte
	info, err := Scan(ctx, store, key, func(en *manifest.Entry) error {
		for _, x := range en.Extents {
			if _, ok := seen[x.Chunk.Sum]; !ok {
				seen[x.Chunk.Sum] = struct{}{}
				sums = append(sums, x.Chunk.Sum)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunks of %s: %w", key, err)
	}
	keys := make([]string, len(sums))
	for i, sum := range sums {
		keys[i] = manifest.ChunkKey(info.Space, sum)
	}
	return keys, nil
}

// FetchChunk reads chunk ref of chunk space space from store into data
// (reused; its compressed bytes into *comp, reused too) and checks it: it
// must decompress to exactly ref.len bytes whose SHA-256 is its name.
func FetchChunk(ctx context.Context, store Store, space string, dec *zstd.Decoder, ref manifest.ChunkRef, comp *[]byte, data []byte) ([]byte, error) {
	key := manifest.ChunkKey(space, ref.Sum)
	rc, err := store.Get(ctx, key)
	if err != nil {
		return data, fmt.Errorf("read chunk %s: %w", key, err)
	}
	buf := bytes.NewBuffer((*comp)[:0])
	// A compressed chunk is never much larger than maxChunk; one that is
	// is not a chunk of ours.
	_, err = buf.ReadFrom(io.LimitReader(rc, 2*MaxChunk+1))
	rc.Close()
	if err != nil {
		return data, fmt.Errorf("read chunk %s: %w", key, err)
	}
	*comp = buf.Bytes()
	if len(*comp) > 2*MaxChunk {
		return data, fmt.Errorf("%w: %s is %d bytes compressed", ErrCorruptChunk, key, len(*comp))
	}
	data, err = dec.DecodeAll(*comp, data[:0])
	if err != nil {
		return data, fmt.Errorf("%w: %s: %w", ErrCorruptChunk, key, err)
	}
	if int64(len(data)) != ref.Len || sha256.Sum256(data) != ref.Sum {
		return data, fmt.Errorf("%w: %s does not hold what its name says", ErrCorruptChunk, key)
	}
	return data, nil
}
