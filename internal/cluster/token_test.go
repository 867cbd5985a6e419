package cluster

import (
	"errors"
	"strings"
	"testing"
)

const fp = "86b7698d739762a2fb1995567871612d027ea79f37b62bb7f9a6d1cb7b94e5ab"

func TestJoinTokenRoundTrip(t *testing.T) {
	tok := NewJoinToken(fp, "edge-1.eu_west")
	s := tok.String()
	if !strings.HasPrefix(s, "KILN1"+fp+"::edge-1.eu_west:") || len(s) != 5+64+2+len("edge-1.eu_west")+1+secretLen {
		t.Fatalf("token %q: want KILN1<fp>::<node>:<%d chars>", s, secretLen)
	}
	got, err := ParseJoinToken("  " + s + "\n")
	if err != nil || got != tok {
		t.Fatalf("ParseJoinToken(%q) = %+v, %v; want %+v", s, got, err, tok)
	}
	if other := NewJoinToken(fp, "edge-1.eu_west"); other.Secret == tok.Secret || other.Digest() == tok.Digest() {
		t.Error("two tokens share a secret")
	}
	if d := tok.Digest(); len(d) != 64 || strings.Contains(d, tok.Secret) {
		t.Errorf("Digest = %q: want 64 hex, not the secret", d)
	}
}

func TestParseJoinTokenRefuses(t *testing.T) {
	good := NewJoinToken(fp, "n1").String()
	secret := good[strings.LastIndexByte(good, ':')+1:]
	for name, s := range map[string]string{
		"empty":            "",
		"k3s":              "K10" + fp + "::server:" + secret,
		"short fp":         "KILN1" + fp[:63] + "::n1:" + secret,
		"upper-case fp":    "KILN1" + strings.ToUpper(fp) + "::n1:" + secret,
		"no separator":     "KILN1" + fp + "n1:" + secret,
		"one colon":        "KILN1" + fp + ":n1:" + secret,
		"no node":          "KILN1" + fp + "::" + secret,
		"empty node":       "KILN1" + fp + ":::" + secret,
		"bad node":         "KILN1" + fp + "::-n1:" + secret,
		"node with slash":  "KILN1" + fp + "::a/b:" + secret,
		"short secret":     "KILN1" + fp + "::n1:" + secret[1:],
		"long secret":      "KILN1" + fp + "::n1:" + secret + "a",
		"secret not b62":   "KILN1" + fp + "::n1:" + secret[1:] + "-",
		"space inside":     "KILN1" + fp + ":: n1:" + secret,
		"colon in node":    "KILN1" + fp + "::a:b:" + secret,
		"trailing garbage": good + " x",
	} {
		if got, err := ParseJoinToken(s); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("%s: ParseJoinToken(%q) = %+v, %v; want ErrMalformedToken", name, s, got, err)
		}
	}
}

// FuzzParseJoinToken: whatever parses prints back as itself, and its
// parts are valid.
func FuzzParseJoinToken(f *testing.F) {
	f.Add(NewJoinToken(fp, "n1").String())
	f.Add("KILN1" + fp + "::a:b:" + strings.Repeat("a", secretLen))
	f.Add("KILN1" + fp + ":::" + strings.Repeat("a", secretLen))
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseJoinToken(s)
		if err != nil {
			return
		}
		if tok.String() != strings.TrimSpace(s) {
			t.Fatalf("ParseJoinToken(%q).String() = %q", s, tok.String())
		}
		if ValidName(tok.Node) != nil || len(tok.Secret) != secretLen || len(tok.CAFingerprint) != 64 {
			t.Fatalf("ParseJoinToken(%q) = %+v: invalid parts", s, tok)
		}
	})
}
