package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/instance"
	"github.com/kilnhq/kiln/internal/runtime"
)

const nodeStopAllAbout = `Stop the game servers of this data dir that run on without kiln serve: a
process-runtime server outlives kiln serve (it runs under a holder of its own,
kiln shim) and the next kiln serve re-attaches to it. This gives each its stop
command and kills it after --timeout, through its holder, all at once; it
prints one line a server. kiln serve must not run on the data dir (it would
take the stops for crashes): stop servers through the API while it runs. Their
desired state is kept, so the next kiln serve starts those meant to run (to
keep one down, stop it through the API). Docker containers are not touched.`

// nodeStopAll runs `kiln admin node stop-all`: it talks to the holders of
// <data-dir>/run directly (runtime.StopHeld), while holding the data
// dir's lock, so that no kiln serve starts and re-attaches meanwhile.
func nodeStopAll(ctx context.Context, dataDir string, timeout time.Duration, kill bool, stdout io.Writer) error {
	if _, err := os.Stat(dataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	lock, err := instance.LockDir(dataDir, os.Getpid())
	if inUse, ok := errors.AsType[*instance.InUseError](err); ok {
		who := "kiln serve"
		if inUse.PID > 0 {
			who += " (pid " + strconv.Itoa(inUse.PID) + ")"
		}
		return fmt.Errorf("%s runs on %s and supervises its servers: stop them through the API, or stop kiln serve first (its servers keep running) and run this again", who, dataDir)
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	stateDir := filepath.Join(dataDir, "run")
	ids, err := runtime.HeldServers(stateDir)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		fmt.Fprintf(stdout, "no game server runs under a holder in %s\n", stateDir)
		return nil
	}
	slices.Sort(ids)
	lines := make([]string, len(ids))
	failed := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			exit, err := runtime.StopHeld(ctx, stateDir, id, kill, timeout)
			line := id + "\t"
			switch {
			case errors.Is(err, runtime.ErrNoHolder):
				line += "not running"
			case err != nil:
				line += "not stopped: " + err.Error()
				mu.Lock()
				failed++
				mu.Unlock()
			case exit.Signal != "":
				line += "stopped (killed by " + exit.Signal + ")"
			default:
				line += "stopped (exit code " + strconv.Itoa(exit.Code) + ")"
			}
			lines[i] = line
		})
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d servers could not be stopped", failed, len(ids))
	}
	return nil
}
