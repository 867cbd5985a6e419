package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// adminCommand is one `kiln admin SUBJECT VERB`.
type adminCommand struct {
	subject, verb string
	args          []string // names of the positional arguments
	flags         string   // the command's own flags, as shown in the list
	about         string
}

var adminCommands = []adminCommand{
	{"team", "create", []string{"NAME"}, "", "create a team, print its id"},
	{"team", "limits", []string{"NAME"}, "[--servers N] [--memory SIZE] [--disk SIZE] [--snapshots N]", "show or set a team's limits (0 or none: no limit)"},
	{"token", "create", nil, "--team NAME --kind user|agent --name LABEL", "issue a token, print only the token (shown once)"},
	{"token", "list", nil, "--team NAME", "list a team's tokens (never the tokens themselves)"},
	{"token", "revoke", []string{"ID"}, "", "revoke a token (it fails from its next request)"},
	{"dbhost", "add", []string{"NAME"}, "--engine postgres|mariadb --dsn URL|- [--address HOST:PORT]", "register a database host for dbservices (logs in first; the DSN is stored sealed)"},
	{"dbhost", "list", nil, "", "list the database hosts (never their DSNs)"},
	{"dbhost", "remove", []string{"NAME"}, "", "unregister a database host no dbservice uses"},
	{"node", "add", []string{"NAME"}, "", "make a one-time join token for a new node (valid 1 hour), print only the token"},
	{"node", "list", nil, "[--json]", "list the nodes: status, last heartbeat, memory, disk, free ports, servers"},
	{"node", "drain", []string{"NAME"}, "", "place no new servers on a node"},
	{"node", "undrain", []string{"NAME"}, "", "place servers on a node again"},
	{"node", "remove", []string{"NAME"}, "", "remove a node without servers; its certificate is refused at once"},
	{"node", "stop-all", nil, "[--timeout D] [--kill]", "stop the game servers kiln serve left running on this data dir (it must not run)"},
	{"snapshots", "check", nil, "[--read-data] [--blob-url URL]", "verify the snapshot store (every manifest, every chunk it names; --read-data: read and hash them), mark damaged snapshots, exit 1 if any"},
}

func (c adminCommand) line() string {
	return strings.Join(append([]string{"kiln admin", c.subject, c.verb}, c.args...), " ")
}

// writeAdminCommands lists the admin commands of subject ("" for all).
func writeAdminCommands(w io.Writer, subject string) {
	for _, c := range adminCommands {
		if subject != "" && c.subject != subject {
			continue
		}
		l := c.line()
		if c.flags != "" {
			l += " " + c.flags
		}
		if len(l) > 41 {
			fmt.Fprintf(w, "  %s\n  %-41s  %s\n", l, "", c.about)
		} else {
			fmt.Fprintf(w, "  %-41s  %s\n", l, c.about)
		}
	}
}

func adminUsage(w io.Writer, subject string) {
	fmt.Fprint(w, "Usage:\n")
	writeAdminCommands(w, subject)
	fmt.Fprint(w, "\nThey work on the database of kiln serve (--data-dir or --database-url), also\nwhile it runs; node stop-all works on the data dir's game servers, only while\nit does not. Every command takes -h.\n")
}

func admin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		adminUsage(stdout, "")
		return flag.ErrHelp
	}
	if len(args) < 2 {
		adminUsage(stderr, "")
		return usageError{"admin needs a subject and a verb, e.g. `kiln admin token list --team default`"}
	}
	subject, verb, rest := args[0], args[1], args[2:]
	known := false
	for _, c := range adminCommands {
		known = known || c.subject == subject
	}
	if known && isHelp(verb) {
		adminUsage(stdout, subject)
		return flag.ErrHelp
	}
	var cmd adminCommand
	for _, c := range adminCommands {
		if c.subject == subject && c.verb == verb {
			cmd = c
		}
	}
	if cmd.verb == "" {
		adminUsage(stderr, "")
		return usageError{fmt.Sprintf("unknown admin command %q", subject+" "+verb)}
	}
	if subject == "node" && verb != "stop-all" {
		return adminNode(ctx, cmd, rest, stdout, stderr)
	}
	var sc storeConfig
	about := strings.ToUpper(cmd.about[:1]) + cmd.about[1:] + "."
	switch subject {
	case "node":
		about = nodeStopAllAbout
	case "snapshots":
		about = snapshotsCheckAbout
	}
	s := newSettings(command{synopsis: cmd.line() + " [flags]", about: about}, stdout, stderr)
	if subject == "node" {
		s.fs.StringVar(&sc.DataDir, "data-dir", "./kiln-data", "the data dir of kiln serve")
	} else {
		sc.register(s)
	}
	var team, kind, name string
	var maxServers, maxMemory, maxDisk, maxSnapshots optionalFlag
	var engine, dsn, address, secretKey string
	var timeout time.Duration
	var kill, readData bool
	var bc blobConfig
	switch subject + " " + verb {
	case "snapshots check":
		bc.register(s)
		s.fs.BoolVar(&readData, "read-data", false, "also read every chunk and check it against its SHA-256 (reads the whole store once)")
	case "node stop-all":
		s.fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long each server has to stop after its stop command before it is killed")
		s.fs.BoolVar(&kill, "kill", false, "kill the servers at once (SIGKILL), without their stop command")
	case "dbhost add":
		s.fs.StringVar(&engine, "engine", "", "postgres or mariadb (required)")
		s.fs.StringVar(&dsn, "dsn", "", "the admin URL Kiln logs in with, e.g. postgres://kiln:PASSWORD@db.example:5432/postgres or mariadb://root:PASSWORD@db.example:3306/; - reads it from standard input (keeps it out of the shell's history and ps)")
		s.fs.StringVar(&address, "address", "", "host:port game servers reach the database at (default: the DSN's)")
		s.fs.StringVar(&secretKey, "secret-key", "", "the key kiln serve seals secrets with, when it was given as --secret-key (default: <data-dir>/secret.key)")
	case "team limits":
		s.fs.Var(&maxServers, "servers", "how many servers the team may have (0 or none: no limit)")
		s.fs.Var(&maxMemory, "memory", "total memory of the team's servers, e.g. 32G or 8192M (0 or none: no limit)")
		s.fs.Var(&maxDisk, "disk", "total disk of the team's servers, e.g. 500G (0 or none: no limit)")
		s.fs.Var(&maxSnapshots, "snapshots", "how many snapshots the team may keep, its deployments' automatic ones included; failed ones do not count (0 or none: no limit)")
	case "token create":
		s.fs.StringVar(&team, "team", "", "team name (required)")
		s.fs.StringVar(&kind, "kind", "user", "user or agent")
		s.fs.StringVar(&name, "name", "", "label of the token (a-z, 0-9, _ and -; required)")
	case "token list":
		s.fs.StringVar(&team, "team", "", "team name (required)")
	}
	pos, err := s.parse(rest)
	if err != nil {
		return err
	}
	if err := sc.validate(); err != nil {
		return err
	}
	if len(pos) != len(cmd.args) {
		return usageError{fmt.Sprintf("%s takes %d argument(s), got %d", cmd.line(), len(cmd.args), len(pos))}
	}
	if (subject == "token") && verb != "revoke" && team == "" {
		return usageError{"--team is required"}
	}
	if subject == "node" {
		if timeout < 0 {
			return usageError{"--timeout must not be negative"}
		}
		return nodeStopAll(ctx, sc.DataDir, timeout, kill, stdout)
	}

	db, err := sc.openExisting(ctx, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	a, err := auth.NewService(ctx, db)
	if err != nil {
		return err
	}
	defer a.Close()

	if subject == "dbhost" {
		return dbhost(ctx, db, sc, verb, pos, engine, dsn, address, secretKey, stdout)
	}
	if subject == "snapshots" {
		return snapshotsCheck(ctx, db, sc, bc, readData, stdout, stderr)
	}
	switch subject + " " + verb {
	case "team create":
		t, err := a.CreateTeam(ctx, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, t.ID)
	case "team limits":
		return teamLimits(ctx, db, a, pos[0], maxServers, maxMemory, maxDisk, maxSnapshots, stdout)
	case "token create":
		k, err := auth.ParseKind(kind)
		if err != nil {
			return usageError{err.Error()}
		}
		if name == "" {
			return usageError{"--name is required"}
		}
		tok, _, err := a.CreateToken(ctx, team, k, name)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
	case "token list":
		list, err := a.ListTokens(ctx, team)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tNAME\tCREATED\tREVOKED")
		for _, t := range list {
			revoked := "-"
			if t.RevokedAt != nil {
				revoked = stamp(*t.RevokedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Name, stamp(t.CreatedAt), revoked)
		}
		return tw.Flush()
	case "token revoke":
		if err := a.RevokeToken(ctx, pos[0]); err != nil {
			if errors.Is(err, auth.ErrTokenNotFound) {
				return fmt.Errorf("token %s not found", pos[0])
			}
			return err
		}
		fmt.Fprintf(stdout, "revoked %s\n", pos[0])
	}
	return nil
}

// dbhost runs `kiln admin dbhost add|list|remove`.
func dbhost(ctx context.Context, db *store.DB, sc storeConfig, verb string, pos []string, engine, dsn, address, secretKey string, stdout io.Writer) error {
	var box dbservice.Sealer
	if verb == "add" {
		if engine == "" || dsn == "" {
			return usageError{"--engine and --dsn are required"}
		}
		if dsn == "-" {
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil && line == "" {
				return fmt.Errorf("read the DSN from standard input: %w", err)
			}
			dsn = strings.TrimSpace(line)
		}
		b, err := secretbox.Load(sc.DataDir, secretKey)
		if err != nil {
			return fmt.Errorf("the key for stored secrets: %w", err)
		}
		box = b
	}
	svc := dbservice.NewService(db, box, nil)
	switch verb {
	case "add":
		h, err := svc.AddHost(ctx, pos[0], engine, dsn, address)
		if ve, ok := errors.AsType[*validate.Error](err); ok {
			// Every issue, one a line: the flags are fixed in one go.
			var lines []string
			for _, is := range ve.Issues {
				if is.Path == "name" {
					lines = append(lines, "NAME: "+is.Message)
				} else {
					lines = append(lines, "--"+is.Path+": "+is.Message)
				}
			}
			return usageError{strings.Join(lines, "\n")}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", h.ID, h.Name, h.Engine, h.Address)
	case "list":
		hosts, err := svc.Hosts(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tENGINE\tADDRESS\tDATABASES\tCREATED")
		for _, h := range hosts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", h.ID, h.Name, h.Engine, h.Address, h.Services, stamp(h.CreatedAt))
		}
		return tw.Flush()
	case "remove":
		h, err := svc.RemoveHost(ctx, pos[0])
		if errors.Is(err, dbservice.ErrHostNotFound) {
			return fmt.Errorf("database host %q not found", pos[0])
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", h.Name, h.ID)
	}
	return nil
}

// optionalFlag is a flag that remembers whether it was given.
type optionalFlag struct {
	set bool
	val string
}

func (f *optionalFlag) String() string     { return f.val }
func (f *optionalFlag) Set(v string) error { f.set, f.val = true, v; return nil }

// limitCount reads a count flag of team limits: "none" or "0" is no
// limit (0), else a whole number.
func limitCount(name string, f optionalFlag) (int, error) {
	v := strings.TrimSpace(f.val)
	if strings.EqualFold(v, "none") {
		v = "0"
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usageError{fmt.Sprintf("--%s %q: want a whole number (0 or none: no limit)", name, f.val)}
	}
	return n, nil
}

// limitMB reads a size flag of team limits in MB: "none" or "0" is no
// limit (0), else a size with a unit (spec.ParseSize: 512M, 32G, 1T).
func limitMB(name string, f optionalFlag) (int, error) {
	v := strings.TrimSpace(f.val)
	if v == "0" || strings.EqualFold(v, "none") {
		return 0, nil
	}
	b, err := spec.ParseSize(v)
	if err != nil {
		return 0, usageError{fmt.Sprintf("--%s %s", name, err)}
	}
	return int(b >> 20), nil
}

// teamLimits shows a team's limits, after setting those given.
func teamLimits(ctx context.Context, db *store.DB, a *auth.Service, name string, maxServers, maxMemory, maxDisk, maxSnapshots optionalFlag, stdout io.Writer) error {
	t, err := a.TeamByName(ctx, name)
	if errors.Is(err, auth.ErrTeamNotFound) {
		return fmt.Errorf("team %q not found", name)
	}
	if err != nil {
		return err
	}
	l, err := servers.GetTeamLimits(ctx, db, t.ID)
	if err != nil {
		return err
	}
	if maxServers.set || maxMemory.set || maxDisk.set || maxSnapshots.set {
		if maxServers.set {
			if l.Servers, err = limitCount("servers", maxServers); err != nil {
				return err
			}
		}
		if maxSnapshots.set {
			if l.Snapshots, err = limitCount("snapshots", maxSnapshots); err != nil {
				return err
			}
		}
		if maxMemory.set {
			if l.MemoryMB, err = limitMB("memory", maxMemory); err != nil {
				return err
			}
		}
		if maxDisk.set {
			if l.DiskMB, err = limitMB("disk", maxDisk); err != nil {
				return err
			}
		}
		if err := servers.SetTeamLimits(ctx, db, t.ID, l); err != nil {
			return err
		}
	}
	show := func(n int, unit string) string {
		if n == 0 {
			return "none"
		}
		if unit == "" {
			return strconv.Itoa(n)
		}
		return spec.FormatSize(int64(n) << 20)
	}
	fmt.Fprintf(stdout, "team %s: servers %s, memory %s, disk %s, snapshots %s\n", name, show(l.Servers, ""), show(l.MemoryMB, "M"),
		show(l.DiskMB, "M"), show(l.Snapshots, ""))
	return nil
}

func stamp(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// openExisting opens the database kiln serve set up, and says on stderr
// which one: run in the wrong directory, kiln admin would otherwise look
// at (and used to create) an empty database and report "team not found".
func (c storeConfig) openExisting(ctx context.Context, stderr io.Writer) (*store.DB, error) {
	opts := store.Options{URL: c.DatabaseURL, DataDir: c.DataDir}
	db, err := store.OpenExisting(ctx, opts)
	if errors.Is(err, store.ErrNoSchema) {
		return nil, fmt.Errorf("no Kiln database at %s; run kiln serve first or pass --data-dir/--database-url", opts.Location())
	}
	if behind, ok := errors.AsType[*store.SchemaBehindError](err); ok {
		return nil, fmt.Errorf("the database at %s is older than this kiln (%w); run this version's kiln serve once to migrate it", opts.Location(), behind)
	}
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "kiln: database %s\n", opts.Location())
	return db, nil
}
