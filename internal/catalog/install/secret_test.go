package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestNewSecret: 64 characters of [A-Za-z0-9], a new one each time.
func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		s := NewSecret().Reveal()
		if len(s) != SecretLength || strings.Trim(s, secretAlphabet) != "" {
			t.Fatalf("NewSecret() = %q, want %d alphanumeric characters", s, SecretLength)
		}
		if seen[s] {
			t.Fatalf("NewSecret() repeated %q", s)
		}
		seen[s] = true
		if _, err := ParseSecret(s); err != nil {
			t.Fatalf("ParseSecret(NewSecret()) = %v", err)
		}
	}
}

// TestSecretRedacted: no way of printing, logging or encoding a Secret
// shows its value.
func TestSecretRedacted(t *testing.T) {
	s := NewSecret()
	v := s.Reveal()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("wired", "secret", s, "wiring", ProxyWiring{Secret: s}, "backend", BackendWiring{Secret: s})
	slog.New(slog.NewTextHandler(&logs, nil)).Info("wired", "secret", s)
	j, err := json.Marshal(struct {
		S Secret
		W BackendWiring
	}{s, BackendWiring{Secret: s}})
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{
		"%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s), "%q": fmt.Sprintf("%q", s), "%x": fmt.Sprintf("%x", s),
		"%#v": fmt.Sprintf("%#v", s), "%+v wiring": fmt.Sprintf("%+v", ProxyWiring{Secret: s}),
		"%#v wiring": fmt.Sprintf("%#v", BackendWiring{Secret: s}), "slog": logs.String(), "json": string(j),
		"error": fmt.Errorf("wire: %v", s).Error(),
	} {
		if strings.Contains(out, v) || !strings.Contains(out, redacted) {
			t.Errorf("%s = %q: shows the secret or no redaction", what, out)
		}
	}
}

func TestParseSecret(t *testing.T) {
	for in, ok := range map[string]bool{
		"abc": true, "héllo-wörld_1": true, strings.Repeat("a", maxSecret): true,
		"": false, " a": false, "a\n": false, "a\x00b": false, "\xff": false, strings.Repeat("a", maxSecret+1): false,
	} {
		s, err := ParseSecret(in)
		if ok != (err == nil) || ok && s.Reveal() != in {
			t.Errorf("ParseSecret(%q) = %v, %v; want ok %v", in, s.Reveal(), err, ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalidSecret) || in != "" && strings.Contains(err.Error(), in)) {
			t.Errorf("ParseSecret(%q) error %q: not ErrInvalidSecret or shows the value", in, err)
		}
	}
}
