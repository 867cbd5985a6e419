package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
)

func admin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return usageError{"admin needs a subject and a verb, e.g. `kiln admin token list --team default`"}
	}
	subject, verb, rest := args[0], args[1], args[2:]
	var sc storeConfig
	s := newSettings("kiln admin " + subject + " " + verb)
	s.fs.SetOutput(stderr)
	sc.register(s)
	var team, kind, name string
	switch subject + " " + verb {
	case "team create", "token revoke":
	case "token create":
		s.fs.StringVar(&team, "team", "", "team name")
		s.fs.StringVar(&kind, "kind", "user", "user or agent")
		s.fs.StringVar(&name, "name", "", "label of the token (a-z, 0-9, _ and -)")
	case "token list":
		s.fs.StringVar(&team, "team", "", "team name")
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Sprintf("unknown admin command %q", subject+" "+verb)}
	}
	pos, err := s.parse(rest)
	if err != nil {
		return err
	}
	if err := sc.validate(); err != nil {
		return err
	}
	wantArgs := 0
	if subject+" "+verb == "team create" || subject+" "+verb == "token revoke" {
		wantArgs = 1
	}
	if len(pos) != wantArgs {
		return usageError{fmt.Sprintf("kiln admin %s %s takes %d argument(s), got %d", subject, verb, wantArgs, len(pos))}
	}
	if (subject == "token") && verb != "revoke" && team == "" {
		return usageError{"--team is required"}
	}

	db, err := sc.open(ctx)
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
