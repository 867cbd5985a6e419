package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/store"
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
	{"token", "create", nil, "--team NAME --kind user|agent --name LABEL", "issue a token, print only the token (shown once)"},
	{"token", "list", nil, "--team NAME", "list a team's tokens (never the tokens themselves)"},
	{"token", "revoke", []string{"ID"}, "", "revoke a token (it fails from its next request)"},
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
	fmt.Fprint(w, "\nThey work on the database of kiln serve (--data-dir or --database-url), also\nwhile it runs. Every command takes -h.\n")
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
	var sc storeConfig
	s := newSettings(command{
		synopsis: cmd.line() + " [flags]",
		about:    strings.ToUpper(cmd.about[:1]) + cmd.about[1:] + ".",
	}, stdout, stderr)
	sc.register(s)
	var team, kind, name string
	switch subject + " " + verb {
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

	switch subject + " " + verb {
	case "team create":
		t, err := a.CreateTeam(ctx, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, t.ID)
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
