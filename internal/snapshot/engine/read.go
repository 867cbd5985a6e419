package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// What reads a stored snapshot back — its manifest and its chunks — for
// Export here, for internal/snapshot/restore and for the collector.

// ErrCorruptChunk is a stored chunk whose content is not what its name
// says (its SHA-256 or its length differ, or it does not decompress): the
// restore stops before anything is swapped in.
var ErrCorruptChunk = errors.New("snapshot chunk is corrupt")

// ChunkError is a chunk a read (FetchChunk: a restore, an export, a
// check) found corrupt (Err wraps ErrCorruptChunk) or missing from the
// store (Err wraps blob.ErrNotFound). Key and Ref name it, so that the
// caller can set a corrupt one aside (QuarantineChunk) and tell which
// snapshots hold it. A store that fails (unreachable, refusing) is not a
// ChunkError: the chunk may be whole.
type ChunkError struct {
	Key string
	Ref manifest.ChunkRef
	Err error
}

func (e *ChunkError) Error() string { return e.Err.Error() }
func (e *ChunkError) Unwrap() error { return e.Err }

// Corrupt reports whether the chunk was found corrupt (not missing).
func (e *ChunkError) Corrupt() bool { return errors.Is(e.Err, ErrCorruptChunk) }

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
	info, refs, err := ChunkRefs(ctx, store, key)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(refs))
	for i, ref := range refs {
		keys[i] = manifest.ChunkKey(info.Space, ref.Sum)
	}
	return keys, nil
}

// ChunkRefs reads the manifest under key, checked whole (Scan), and
// returns what it says of itself (its chunk space) and the chunks it
// references, in manifest order, each once, with their lengths: what a
// check verifies (FetchChunk). Errors: manifest.ErrInvalid, the store's
// errors (blob.ErrNotFound for a missing manifest).
func ChunkRefs(ctx context.Context, store Store, key string) (manifest.Info, []manifest.ChunkRef, error) {
	seen := make(map[[32]byte]struct{})
	var refs []manifest.ChunkRef
	info, err := Scan(ctx, store, key, func(en *manifest.Entry) error {
		for _, x := range en.Extents {
			if _, ok := seen[x.Chunk.Sum]; !ok {
				seen[x.Chunk.Sum] = struct{}{}
				refs = append(refs, x.Chunk)
			}
		}
		return nil
	})
	if err != nil {
		return manifest.Info{}, nil, fmt.Errorf("chunks of %s: %w", key, err)
	}
	return info, refs, nil
}

// FetchChunk reads chunk ref of chunk space space from store into data
// (reused; its compressed bytes into *comp, reused too) and checks it: it
// must decompress to exactly ref.len bytes whose SHA-256 is its name.
// Errors: *ChunkError (corrupt, or missing), the store's.
func FetchChunk(ctx context.Context, store Store, space string, dec *zstd.Decoder, ref manifest.ChunkRef, comp *[]byte, data []byte) ([]byte, error) {
	key := manifest.ChunkKey(space, ref.Sum)
	if err := readChunk(ctx, store, key, comp); err != nil {
		if errors.Is(err, blob.ErrNotFound) {
			err = &ChunkError{Key: key, Ref: ref, Err: err}
		}
		return data, err
	}
	return checkChunk(dec, key, ref, *comp, data)
}

// readChunk reads the stored (compressed) bytes of the chunk under key
// into *comp (reused).
func readChunk(ctx context.Context, store Store, key string, comp *[]byte) error {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read chunk %s: %w", key, err)
	}
	buf := bytes.NewBuffer((*comp)[:0])
	// A compressed chunk is never much larger than maxChunk; one that is
	// is not a chunk of ours (checkChunk refuses it).
	_, err = buf.ReadFrom(io.LimitReader(rc, 2*MaxChunk+1))
	rc.Close()
	*comp = buf.Bytes()
	if err != nil {
		return fmt.Errorf("read chunk %s: %w", key, err)
	}
	return nil
}

// checkChunk decompresses comp, the stored bytes of the chunk ref under
// key, into data (reused) and checks them against the chunk's name.
// Errors: *ChunkError wrapping ErrCorruptChunk.
func checkChunk(dec *zstd.Decoder, key string, ref manifest.ChunkRef, comp, data []byte) ([]byte, error) {
	corrupt := func(err error) error { return &ChunkError{Key: key, Ref: ref, Err: err} }
	if len(comp) > 2*MaxChunk {
		return data, corrupt(fmt.Errorf("%w: %s is %d bytes compressed", ErrCorruptChunk, key, len(comp)))
	}
	data, err := dec.DecodeAll(comp, data[:0])
	if err != nil {
		return data, corrupt(fmt.Errorf("%w: %s: %w", ErrCorruptChunk, key, err))
	}
	if int64(len(data)) != ref.Len || sha256.Sum256(data) != ref.Sum {
		return data, corrupt(fmt.Errorf("%w: %s does not hold what its name says", ErrCorruptChunk, key))
	}
	return data, nil
}
