package restore

import (
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
)

// run is Run with no reservation limit, failing the test on an error.
func run(t testing.TB, root *files.Root, store engine.Store, key string, opts Options) Result {
	t.Helper()
	out, err := Run(t.Context(), root, enginetest.Unlimited(t), store, key, opts)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return out
}
