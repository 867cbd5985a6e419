package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

var tokenShape = regexp.MustCompile(`^kiln_(pat|agt)_[0-9A-Za-z]{36}$`)

func TestGenerateParse(t *testing.T) {
	for _, kind := range []Kind{KindUser, KindAgent} {
		seen := map[Secret]bool{}
		for range 200 {
			tok := generate(kind)
			if !tokenShape.MatchString(string(tok)) {
				t.Fatalf("generate(%s) = %q, not of the documented shape", kind, tok)
			}
			if seen[tok] {
				t.Fatalf("generate(%s) repeated %q", kind, tok)
			}
			seen[tok] = true
			got, err := Parse(string(tok))
			if err != nil || got != kind {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tok, got, err, kind)
			}
		}
	}
	if p := generate(KindUser); !strings.HasPrefix(string(p), "kiln_pat_") {
		t.Errorf("user token %q lacks kiln_pat_", p)
	}
	if p := generate(KindAgent); !strings.HasPrefix(string(p), "kiln_agt_") {
		t.Errorf("agent token %q lacks kiln_agt_", p)
	}
}

func TestParseRejects(t *testing.T) {
	good := string(generate(KindUser))
	flipped := []byte(good)
	// Change one random character: the checksum must catch it.
	if flipped[12] == 'a' {
		flipped[12] = 'b'
	} else {
		flipped[12] = 'a'
	}
	badSum := []byte(good)
	if badSum[len(badSum)-1] == '0' {
		badSum[len(badSum)-1] = '1'
	} else {
		badSum[len(badSum)-1] = '0'
	}
	cases := map[string]string{
		"empty":          "",
		"no prefix":      good[len("kiln_pat_"):],
		"other prefix":   "ptlc_" + good[len("kiln_pat_"):],
		"short":          good[:len(good)-1],
		"long":           good + "0",
		"bad char":       good[:20] + "-" + good[21:],
		"flipped random": string(flipped),
		"wrong checksum": string(badSum),
		"uppercase pre":  "KILN_PAT_" + good[len("kiln_pat_"):],
		"space":          " " + good,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if k, err := Parse(in); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("Parse(%q) = %q, %v; want ErrInvalidToken", in, k, err)
			}
		})
	}
}

func TestChecksumKnownValue(t *testing.T) {
	// CRC32("") = 0 → "000000"; CRC32("a") = 0xe8b7be43 = 3904355907.
	if got := checksum(""); got != "000000" {
		t.Errorf(`checksum("") = %q, want "000000"`, got)
	}
	const want = "4GEHKN" // 3904355907 in base62 with digits 0-9A-Za-z (checked with Python zlib.crc32)
	if got := checksum("a"); got != want {
		t.Errorf(`checksum("a") = %q, want %q`, got, want)
	}
}

func TestServiceLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		s, err := NewService(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		tok, created, err := s.Bootstrap(ctx)
		if err != nil || !created || !tokenShape.MatchString(string(tok)) {
			t.Fatalf("Bootstrap = %q, %v, %v; want a new token", tok, created, err)
		}
		again, created, err := s.Bootstrap(ctx)
		if err != nil || created || again != "" {
			t.Fatalf("second Bootstrap = %q, %v, %v; want nothing created", again, created, err)
		}
		p, err := s.Authenticate(ctx, string(tok))
		if err != nil || p.Kind != KindUser || p.Label != "admin" || p.Actor() != "user:admin" {
			t.Fatalf("Authenticate(bootstrap) = %+v, %v", p, err)
		}
		def, err := s.TeamByName(ctx, "default")
		if err != nil || def.ID != p.TeamID {
			t.Fatalf("TeamByName(default) = %+v, %v; want id %s", def, err, p.TeamID)
		}

		if _, err := s.CreateTeam(ctx, "Bad Name"); !isValidation(err) {
			t.Errorf("CreateTeam(bad) err = %v, want *validate.Error", err)
		}
		other, err := s.CreateTeam(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateTeam(ctx, "other"); !errors.Is(err, ErrTeamExists) {
			t.Errorf("CreateTeam(dup) err = %v, want ErrTeamExists", err)
		}
		agt, info, err := s.CreateToken(ctx, "other", KindAgent, "ci-bot")
		if err != nil || !strings.HasPrefix(string(agt), "kiln_agt_") || info.TeamID != other.ID {
			t.Fatalf("CreateToken = %q, %+v, %v", agt, info, err)
		}
		if _, _, err := s.CreateToken(ctx, "nope", KindUser, "x"); !errors.Is(err, ErrTeamNotFound) {
			t.Errorf("CreateToken(unknown team) err = %v, want ErrTeamNotFound", err)
		}
		if _, _, err := s.CreateToken(ctx, "other", KindUser, "Has Space"); !isValidation(err) {
			t.Errorf("CreateToken(bad label) err = %v, want *validate.Error", err)
		}
		p2, err := s.Authenticate(ctx, string(agt))
		if err != nil || p2.TeamID != other.ID || p2.Actor() != "agent:ci-bot" {
			t.Fatalf("Authenticate(agent) = %+v, %v", p2, err)
		}
		// A well-formed token that was never issued.
		if _, err := s.Authenticate(ctx, string(generate(KindUser))); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Authenticate(unknown) err = %v, want ErrInvalidToken", err)
		}
		list, err := s.ListTokens(ctx, "other")
		if err != nil || len(list) != 1 || list[0].ID != info.ID || list[0].RevokedAt != nil {
			t.Fatalf("ListTokens = %+v, %v", list, err)
		}
		if err := s.RevokeToken(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(ctx, info.ID); err != nil {
			t.Errorf("second revoke: %v, want nil", err)
		}
		if err := s.RevokeToken(ctx, "tok_missing"); !errors.Is(err, ErrTokenNotFound) {
			t.Errorf("RevokeToken(unknown) err = %v, want ErrTokenNotFound", err)
		}
		if _, err := s.Authenticate(ctx, string(agt)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Authenticate(revoked) err = %v, want ErrInvalidToken", err)
		}
		list, _ = s.ListTokens(ctx, "other")
		if len(list) != 1 || list[0].RevokedAt == nil {
			t.Fatalf("after revoke ListTokens = %+v; want revoked_at set", list)
		}
		// Only the digest is stored.
		var stored string
		if err := db.Read().QueryRowContext(ctx, `SELECT digest FROM tokens WHERE id = $1`, info.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stored, string(agt)[9:]) || len(stored) != 64 {
			t.Errorf("stored digest %q: want 64 hex characters, never the token", stored)
		}
	})
}

func isValidation(err error) bool {
	_, ok := errors.AsType[*validate.Error](err)
	return ok
}
