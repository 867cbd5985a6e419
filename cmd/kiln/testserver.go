package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kilnhq/kiln/internal/testserver"
)

// testServer runs the bundled fake Minecraft server (profile kiln-test):
// status ping, vanilla-like log lines, console commands, a world folder;
// with --proxy the fake Velocity proxy (profile kiln-test-proxy). Hidden
// from the usage text: it is what servers run, not what operators do.
func testServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := command{
		synopsis: "kiln testserver [flags]",
		about:    "Run the fake Minecraft server of the kiln-test profile (what kiln serve --dev\nstarts; commands on stdin, log on stdout). With --proxy, the fake Velocity proxy\nof kiln-test-proxy: it reads velocity.toml and answers pings with its backend's status.",
	}
	fs := flag.NewFlagSet(cmd.synopsis, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var o testserver.Options
	fs.IntVar(&o.Port, "port", 0, "game port (0 = server.properties server-port, else any free port; with --proxy velocity.toml bind)")
	fs.StringVar(&o.Host, "host", "", "address to listen on (empty = all interfaces; with --proxy velocity.toml bind)")
	fs.StringVar(&o.Dir, "dir", "", "server root (default the working directory)")
	fs.StringVar(&o.MOTD, "motd", "", "message of the day (default server.properties motd)")
	fs.IntVar(&o.MaxPlayers, "max-players", 0, "player slots (default server.properties max-players)")
	fs.StringVar(&o.Version, "version", "", "game version to report (default "+testserver.DefaultVersion+")")
	fs.BoolVar(&o.Proxy, "proxy", false, "play a Velocity proxy (velocity.toml; a ping answers with the first try backend's status)")
	fs.DurationVar(&o.StartupDelay, "startup-delay", 0, "simulated boot time (default "+testserver.DefaultStartupDelay.String()+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, cmd, fs)
			return err
		}
		printHelp(stderr, cmd, fs)
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("kiln testserver takes no arguments, got %q", fs.Args())}
	}
	if o.Proxy && (o.MOTD != "" || o.MaxPlayers != 0 || o.Version != "") {
		return usageError{"--motd, --max-players and --version do not apply to --proxy (it answers with its backend's)"}
	}
	if o.StartupDelay < 0 || o.StartupDelay > time.Minute {
		return usageError{"--startup-delay must be between 0 and 1m"}
	}
	return testserver.Run(ctx, o, os.Stdin, stdout)
}
