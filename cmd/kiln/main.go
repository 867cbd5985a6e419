// Command kiln runs and administers Kiln: `kiln serve` runs the whole
// service; `kiln admin …` manages teams and tokens in the same database,
// also while serve runs.
//
// kiln serve starts in this order, each step before anything that a
// failure of it should prevent: flags and config; the data dir's lock
// (internal/instance: one kiln serve per data dir, PostgreSQL included,
// since the data dir holds the server roots; a second one is refused at
// once, naming the holder's pid); the listener (a taken port fails before
// the database is created or migrated and before the bootstrap token,
// shown once, is made); the database; this process's instance id (a row
// in instances, logged); the bootstrap token; the services. Requests wait
// in the listener's queue until recovery is done.
//
// Everything that runs while serving (HTTP, the servers service's
// recovery and sampler, the downloads, the instance heartbeat, the rate
// limit sweep) shares one errgroup: the first error, a failed recovery
// included, stops the rest and is printed as `kiln: …` with exit status
// 1. SIGINT or SIGTERM stops everything and exits 0: HTTP first
// (Shutdown, 10 s), with event streams (the console's SSE) ended as
// shutdown begins (streams.go), since Shutdown would wait for them
// forever; then downloads (they fail as interrupted); then the servers
// service, which gives process-runtime game servers their stop command
// and lets docker containers run on, to be re-adopted at the next start;
// then the instance row, the runtime, the store and the lock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `kiln — run Minecraft networks behind one API

Usage:
  kiln serve [flags]                         run the service (kiln serve -h for flags)
  kiln admin team create NAME                create a team, print its id
  kiln admin token create --team NAME --kind user|agent --name LABEL
                                             issue a token, print only the token
  kiln admin token list --team NAME          list a team's tokens
  kiln admin token revoke ID                 revoke a token
  kiln version                               print the version

Every setting is a flag, a KILN_* environment variable or a key of --config.
`

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kiln:", err)
		}
		os.Exit(exitCode(err))
	}
}

// usageError marks a mistake on the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	if _, ok := errors.AsType[usageError](err); ok || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "admin":
		return admin(ctx, args[1:], stdout, stderr)
	case "testserver":
		return testServer(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}
