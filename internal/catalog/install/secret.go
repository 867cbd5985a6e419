package install

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SecretLength is the length of a generated forwarding secret: 64
// alphanumeric characters, as Shulker generates them (about 381 bits).
const SecretLength = 64

const secretAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// maxSecret bounds a secret ParseSecret accepts.
const maxSecret = 1024

// redacted is what a Secret prints as, everywhere but Reveal.
const redacted = "[redacted]"

// Secret is a proxy forwarding secret: Velocity's forwarding.secret and
// Paper's proxies.velocity.secret. It never prints itself: String,
// GoString, Format and LogValue all give "[redacted]"; only Reveal gives
// the value, for the files that need it and for storing it. The zero
// Secret is empty (no secret).
type Secret struct{ value string }

// NewSecret generates a secret of SecretLength characters from
// [A-Za-z0-9] with crypto/rand (rejection sampling, so every character
// is equally likely).
func NewSecret() Secret {
	const n = len(secretAlphabet) // 62
	const limit = 256 - 256%n     // 248: bytes at or above it are dropped
	out := make([]byte, 0, SecretLength)
	buf := make([]byte, 2*SecretLength)
	for len(out) < SecretLength {
		rand.Read(buf) // never fails (crypto/rand, Go 1.24+)
		for _, b := range buf {
			if int(b) < limit && len(out) < SecretLength {
				out = append(out, secretAlphabet[int(b)%n])
			}
		}
	}
	return Secret{value: string(out)}
}

// ErrInvalidSecret is returned by ParseSecret for a value no proxy or
// backend would read back the same.
var ErrInvalidSecret = errors.New("invalid forwarding secret")

// ParseSecret turns a stored secret back into a Secret. It must be
// non-empty, at most 1024 bytes of UTF-8 with no control characters and
// no surrounding spaces (Velocity joins the lines of its file, YAML
// trims plain scalars). It returns ErrInvalidSecret otherwise; the error
// never contains the value.
func ParseSecret(s string) (Secret, error) {
	switch {
	case s == "":
		return Secret{}, fmt.Errorf("%w: empty", ErrInvalidSecret)
	case len(s) > maxSecret:
		return Secret{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidSecret, maxSecret)
	case !utf8.ValidString(s):
		return Secret{}, fmt.Errorf("%w: not UTF-8", ErrInvalidSecret)
	case strings.TrimSpace(s) != s:
		return Secret{}, fmt.Errorf("%w: surrounding spaces", ErrInvalidSecret)
	case strings.ContainsFunc(s, unicode.IsControl):
		return Secret{}, fmt.Errorf("%w: control character", ErrInvalidSecret)
	}
	return Secret{value: s}, nil
}

// Reveal is the secret's value. Call it only to write a file that needs
// it or to store it.
func (s Secret) Reveal() string { return s.value }

// IsZero reports whether s is the empty secret.
func (s Secret) IsZero() bool { return s.value == "" }

// File is the content of Velocity's forwarding.secret: the value, with no
// newline.
func (s Secret) File() []byte { return []byte(s.value) }

// String redacts the secret.
func (s Secret) String() string { return redacted }

// GoString redacts the secret (%#v).
func (s Secret) GoString() string { return redacted }

// Format redacts the secret for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue redacts the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText redacts the secret, so encoding/json and YAML encoders never
// write it by accident; store Reveal explicitly.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
