// Command kiln runs and administers Kiln: `kiln serve` runs the whole
// service; `kiln admin …` manages teams and tokens in the same database,
// also while serve runs.
//
// kiln serve starts in this order, each step before anything that a
// failure of it should prevent: flags and config; the descriptor limit
// (RLIMIT_NOFILE's soft limit raised to the hard one, both logged: a
// connection, a root held open, a pipe each cost one); the data dir's lock
// (internal/instance: one kiln serve per data dir, PostgreSQL included,
// since the data dir holds the server roots; a second one is refused at
// once, naming the holder's pid); the listener (a taken port fails before
// the database is created or migrated and before the bootstrap token,
// shown once, is made); the database; this process's instance id (a row
// in instances, logged); the bootstrap token; the services. Requests wait
// in the listener's queue until recovery is done. Both listeners cap
// their connections per address and in all (internal/connlimit: the API
// every open connection, --max-conns…, lowered to half the descriptor
// limit; SFTP those not logged in yet, --sftp-max-unauthenticated…), so
// idle connections cannot take every descriptor; and both take a failed
// accept (EMFILE…) as transient, backing off as net/http does: it used to
// end the SFTP server, and with it kiln serve.
//
// Everything that runs while serving (HTTP, the servers service's
// recovery and sampler, the downloads, the instance heartbeat, the rate
// limit sweep) shares one errgroup: the first error, a failed recovery
// included, stops the rest and is printed as `kiln: …` with exit status
// 1. SIGINT or SIGTERM stops everything and exits 0: HTTP first
// (Shutdown, 10 s), with event streams (the console's SSE) ended as
// shutdown begins (streams.go), since Shutdown would wait for them
// forever; then downloads (they fail as interrupted); then the servers
// service, which lets game servers run on (process-runtime ones under
// their holders, `kiln shim`; docker containers), to be re-adopted at the
// next start, or with --stop-servers-on-exit gives each its stop command;
// then the instance row, the runtime, the store and the lock. A kill -9
// or a crash leaves the game servers running just the same.
//
// Command line: every command and subcommand answers -h/--help with its
// synopsis (positional arguments named: `kiln admin token revoke ID`),
// what it does and its flags, on stdout, exit status 0. A mistake prints
// the same help on stderr, then `kiln: <what is wrong>`, exit status 2;
// any other failure exits 1. kiln version and kiln --version print the
// version (resolveVersion: the -ldflags value, else the module version the
// go command recorded, else "dev") and the commit and its time when the
// build recorded them (versionLine). kiln admin never creates or migrates a
// database (store.OpenExisting): it names on stderr the database it
// opened, and refuses, naming where it looked, when there is none.
//
// kiln admin node stop-all talks to the game servers' holders directly
// (runtime.StopHeld), not to kiln serve, which has no local control
// channel and would take the stops for crashes: it takes the data dir's
// lock, so it refuses while kiln serve runs and keeps one from starting
// meanwhile, and needs no database. kiln shim (a holder), kiln
// sandbox-exec (the trampoline that gives a game server with a user of
// its own a private /tmp, runtime.RunSandbox) and kiln testserver (the
// kiln-test game) are hidden: kiln serve runs them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// usage is the text of kiln -h.
func usage() string {
	var b strings.Builder
	b.WriteString(`kiln — run Minecraft networks behind one API

Usage:
  kiln serve [flags]                         run the service
  kiln agent --server URL [flags]            run a game host of a cluster (joins with --join-token)
`)
	writeAdminCommands(&b, "")
	b.WriteString(`  kiln ping HOST:PORT                        a Minecraft server's or proxy's status (Server List Ping)
  kiln version                               print the version (also kiln --version)

Every command takes -h. Every setting is a flag, a KILN_* environment
variable or a key of --config.
`)
	return b.String()
}

const versionHelp = `Usage: kiln version

Print kiln's version (the one -ldflags "-X main.version=…" gave, else the
module version the go command recorded, else "dev") and, when the build
recorded it, its git commit ("+dirty": the work tree had changes) and that
commit's time:

  kiln v0.4.2 (commit 0123456789ab from 2026-11-28T10:20:30Z)
`

// version is set at build time with -ldflags "-X main.version=…"; kiln
// reports buildVersion.
var version = "dev"

// buildVersion is the version kiln reports (see resolveVersion).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	return resolveVersion(version, bi, ok)
}

// versionLine is what kiln version prints: "kiln", the version
// (resolveVersion), and, when the go command recorded the build's commit
// (go build in a git work tree: vcs.revision, vcs.time, vcs.modified), the
// commit's first 12 hex digits, "+dirty" when the work tree had changes,
// and the commit's time, not the build's: two builds of one commit are the
// same bytes (scripts/release relies on it), and the time says how old the
// code is. kiln dev (commit 0123456789ab+dirty from 2026-11-28T10:20:30Z).
func versionLine(ldflags string, bi *debug.BuildInfo, ok bool) string {
	line := "kiln " + resolveVersion(ldflags, bi, ok)
	if !ok || bi == nil {
		return line
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return line
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	if at == "" {
		return line + " (commit " + rev + ")"
	}
	return line + " (commit " + rev + " from " + at + ")"
}

// resolveVersion picks, in order: the -ldflags value when one was given
// (whoever built chose it; since Go 1.24 go build also stamps a VCS
// pseudo-version, which must not override an explicit release number);
// else the main module's version as the go command recorded it (`go
// install github.com/kilnhq/kiln/cmd/kiln@v1.2.3` records v1.2.3); else
// "dev".
func resolveVersion(ldflags string, bi *debug.BuildInfo, ok bool) string {
	if ldflags != "" && ldflags != "dev" {
		return ldflags
	}
	if ok && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

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

// exitCode: 0 after help that was asked for (flag.ErrHelp), 2 for a
// mistake on the command line, 1 for anything else.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return 2
	}
	return 1
}

// isHelp reports whether a command-line word asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "admin":
		return admin(ctx, args[1:], stdout, stderr)
	case "agent":
		return agentMain(ctx, args[1:], stdout, stderr)
	case "testserver":
		return testServer(ctx, args[1:], stdout, stderr)
	case "shim":
		return shim(ctx, args[1:])
	case "sandbox-exec":
		return sandboxExec(args[1:])
	case "ping":
		return ping(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		if len(args) > 1 {
			if isHelp(args[1]) {
				fmt.Fprint(stdout, versionHelp)
				return flag.ErrHelp
			}
			return usageError{fmt.Sprintf("kiln version takes no arguments, got %q", args[1:])}
		}
		bi, ok := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, versionLine(version, bi, ok))
		return nil
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, usage())
		return flag.ErrHelp
	}
	fmt.Fprint(stderr, usage())
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}
