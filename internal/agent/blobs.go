package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/cluster"
)

// BlobStoreError: the agent does not see the control plane's blob store
// (the marker its Welcome names is missing from the agent's store, holds
// other bytes, or cannot be read), or one of the two has no store to
// show. The agent stops with its sentence: every node must share the
// store the snapshots and artifacts live in.
type BlobStoreError struct {
	Store  string // the agent's store, without credentials (blob.Store.String); "" when it has none
	Reason string
	Err    error // the store's, when it could not be read
}

func (e *BlobStoreError) Error() string {
	where := "(none given)"
	if e.Store != "" {
		where = "at " + e.Store
	}
	return fmt.Sprintf("this agent does not see the control plane's blob store %s: %s; give kiln agent the --blob-url every node shares "+
		"(an S3 bucket, or a directory each machine mounts) and start it again", where, e.Reason)
}

func (e *BlobStoreError) Unwrap() error { return e.Err }

// checkBlobs proves that the agent's store is the control plane's: it
// holds marker's object with the same bytes (Welcome.BlobMarker). A
// control plane and an agent without a store (tests of the protocol
// alone) pass; one with a store and the other without do not.
// Errors: *BlobStoreError.
func checkBlobs(ctx context.Context, st blob.Store, marker *cluster.BlobMarker) error {
	switch {
	case st == nil && marker == nil:
		return nil
	case st == nil:
		return &BlobStoreError{Reason: "this agent was given none (--blob-url)"}
	case marker == nil:
		return &BlobStoreError{Store: st.String(), Reason: "the control plane named no marker to find in it (is it an older kiln?)"}
	}
	if err := blob.ValidateKey(marker.Key); err != nil {
		return &BlobStoreError{Store: st.String(), Reason: "the control plane named a marker that is no blob key", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := cluster.ReadMarker(ctx, st, marker.Key)
	if errors.Is(err, blob.ErrNotFound) {
		return &BlobStoreError{Store: st.String(), Reason: fmt.Sprintf("the marker %s the control plane wrote is not there", marker.Key)}
	}
	if err != nil {
		return &BlobStoreError{Store: st.String(), Reason: fmt.Sprintf("its marker %s cannot be read (%v)", marker.Key, err), Err: err}
	}
	if got.SHA256 != marker.SHA256 {
		return &BlobStoreError{Store: st.String(), Reason: fmt.Sprintf("its marker %s holds other bytes than the control plane's (another store)", marker.Key)}
	}
	return nil
}
