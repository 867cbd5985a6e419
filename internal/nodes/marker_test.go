package nodes

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/agent"
	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/blob/blobtest"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func fileStore(t *testing.T, dir string) blob.Store {
	t.Helper()
	st, err := blob.Open(t.Context(), "file://"+dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAgentSeesBlobStore: the control plane names in its Welcome the
// marker it wrote into its blob store; an agent whose store lacks it
// (another directory), holds other bytes under its key, or who has no
// store stops, saying which store it does not see, before it serves
// anything; an agent on the same store serves. The same with the S3
// server scripts/test starts: another bucket is refused.
func TestAgentSeesBlobStore(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		shared := t.TempDir()
		marker, err := WriteMarker(t.Context(), fileStore(t, shared))
		if err != nil {
			t.Fatal(err)
		}
		if again, err := WriteMarker(t.Context(), fileStore(t, shared)); err != nil || again != marker {
			t.Errorf("WriteMarker again = %+v, %v; want the same marker %+v", again, err, marker)
		}
		if marker.Key != cluster.MarkerKey || len(marker.SHA256) != 64 {
			t.Errorf("marker = %+v", marker)
		}
		other := fileStore(t, t.TempDir())
		forged := fileStore(t, t.TempDir())
		if _, err := forged.Put(t.Context(), cluster.MarkerKey, strings.NewReader("forged\n"), 7); err != nil {
			t.Fatal(err)
		}
		f := newFixture(t, storetest.SQLite(t))
		url, ep := serveEndpointOpts(t, f, EndpointOptions{UnreachableAfter: 3 * time.Second, RevocationPoll: 20 * time.Millisecond, Marker: &marker})

		for _, tc := range []struct {
			name   string
			blobs  blob.Store
			reason string
		}{
			{"edge-other", other, "the marker cluster/marker the control plane wrote is not there"},
			{"edge-forged", forged, "its marker cluster/marker holds other bytes than the control plane's (another store)"},
			{"edge-none", nil, "this agent was given none (--blob-url)"},
		} {
			err := startAgent(t, f, url, tc.name, nil, func(c *agent.Config) { c.Blobs = tc.blobs }).wait(t)
			be, ok := errors.AsType[*agent.BlobStoreError](err)
			if !ok || be.Reason != tc.reason {
				t.Errorf("%s: agent.Run = %v, want *agent.BlobStoreError %q", tc.name, err, tc.reason)
				continue
			}
			if ep.Connected(tc.name) {
				t.Errorf("%s: refused, yet its channel is open", tc.name)
			}
			if tc.blobs == other {
				want := "this agent does not see the control plane's blob store at " + other.String() +
					": the marker cluster/marker the control plane wrote is not there; give kiln agent the --blob-url every node shares (an S3 bucket, or a directory each machine mounts) and start it again"
				if err.Error() != want {
					t.Errorf("agent.Run = %q, want %q", err, want)
				}
			}
		}
		runAgent(t, f, url, "edge-shared", nil, func(c *agent.Config) { c.Blobs = fileStore(t, shared) })
		connected(t, ep, "edge-shared")
		if p := ping(t, ep, "edge-shared"); p.Node != "edge-shared" {
			t.Errorf("ping = %+v", p)
		}
	})
	t.Run("s3", func(t *testing.T) {
		shared, other := blobtest.S3(t), blobtest.S3(t)
		marker, err := WriteMarker(t.Context(), shared)
		if err != nil {
			t.Fatal(err)
		}
		f := newFixture(t, storetest.SQLite(t))
		url, ep := serveEndpointOpts(t, f, EndpointOptions{UnreachableAfter: 3 * time.Second, RevocationPoll: 20 * time.Millisecond, Marker: &marker})
		err = startAgent(t, f, url, "edge-other", nil, func(c *agent.Config) { c.Blobs = other }).wait(t)
		if be, ok := errors.AsType[*agent.BlobStoreError](err); !ok || be.Store != other.String() || be.Reason != "the marker cluster/marker the control plane wrote is not there" {
			t.Errorf("another bucket: agent.Run = %v", err)
		}
		runAgent(t, f, url, "edge-shared", nil, func(c *agent.Config) { c.Blobs = shared })
		connected(t, ep, "edge-shared")
	})
}
