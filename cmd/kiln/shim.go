package main

import (
	"context"
	"os"

	"github.com/kilnhq/kiln/internal/runtime"
)

// shim runs the holder of one game server (runtime.RunHolder): kiln serve
// starts `kiln shim DIR` for each server of the process runtime, so that
// the server outlives it. Hidden from the usage text: kiln serve runs it,
// operators do not.
func shim(ctx context.Context, args []string) error {
	return runtime.RunHolder(ctx, args, buildVersion(), os.Stdin, os.Stdout, os.Stderr)
}
