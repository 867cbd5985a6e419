// Command kiln runs and administers Kiln: `kiln serve` runs the whole
// service; `kiln admin …` manages teams and tokens in the same database,
// also while serve runs.
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
