package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kilnhq/kiln/internal/slp"
)

// ping asks a Minecraft server (or a proxy) for its status with the
// Server List Ping, as a client's server list does, and prints what it
// answered: what "running" means for Kiln, checkable from a shell.
func ping(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := command{
		synopsis: "kiln ping HOST:PORT [flags]",
		about:    "Ask a Minecraft server or proxy for its status (Server List Ping) and print it:\nits message of the day, version, players and the round trip.",
	}
	fs := flag.NewFlagSet(cmd.synopsis, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	// Flags may come before or after the address.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(stdout, cmd, fs)
				return err
			}
			printHelp(stderr, cmd, fs)
			return usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		printHelp(stderr, cmd, fs)
		return usageError{"kiln ping takes one HOST:PORT"}
	}
	addr := pos[0]
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usageError{fmt.Sprintf("%q: want HOST:PORT", addr)}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := slp.Ping(ctx, addr)
	if err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	fmt.Fprintf(stdout, "%s\n%s (protocol %d), %d/%d players, %d ms\n", st.Description, st.Version.Name, st.Version.Protocol,
		st.Players.Online, st.Players.Max, st.Latency.Milliseconds())
	return nil
}
