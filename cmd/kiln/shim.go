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

// sandboxExec is the trampoline a game server with a user of its own
// starts through (runtime.RunSandbox): kiln, or the server's holder,
// starts `kiln sandbox-exec` as root in a mount namespace of its own; it
// mounts the server's private /tmp and /dev/shm, becomes the server's
// user and executes the game in its place. Hidden from the usage text,
// like shim.
func sandboxExec(args []string) error {
	return runtime.RunSandbox(args)
}
