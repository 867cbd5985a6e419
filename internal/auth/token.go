package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"log/slog"
	"strings"

	"github.com/kilnhq/kiln/internal/ids"
)

// Kind is what a token is for: a person (user) or a program (agent).
type Kind string

const (
	KindUser  Kind = "user"
	KindAgent Kind = "agent"
)

const (
	userPrefix  = "kiln_pat_"
	agentPrefix = "kiln_agt_"
	randomLen   = 30
	checksumLen = 6
	bodyLen     = randomLen + checksumLen
)

// ParseKind checks a kind named by an operator.
func ParseKind(s string) (Kind, error) {
	switch Kind(s) {
	case KindUser, KindAgent:
		return Kind(s), nil
	}
	return "", errors.New(`token kind must be "user" or "agent"`)
}

func (k Kind) prefix() string {
	if k == KindAgent {
		return agentPrefix
	}
	return userPrefix
}

// Secret is a token in clear text. It prints as itself (the admin command
// must show it once) but redacts itself in structured logs.
type Secret string

// LogValue keeps tokens out of logs.
func (Secret) LogValue() slog.Value { return slog.StringValue("[REDACTED]") }

// ErrInvalidToken is returned for a missing, malformed, unknown or revoked
// token; callers cannot and need not tell these apart.
var ErrInvalidToken = errors.New("invalid or revoked token")

// generate makes a new token of kind.
func generate(kind Kind) Secret {
	random := ids.RandomBase62(randomLen)
	return Secret(kind.prefix() + random + checksum(random))
}

// checksum is the CRC32 of s in 6 zero-padded base62 digits (62^6 > 2^32).
func checksum(s string) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	v := crc32.ChecksumIEEE([]byte(s))
	var out [checksumLen]byte
	for i := checksumLen - 1; i >= 0; i-- {
		out[i] = digits[v%62]
		v /= 62
	}
	return string(out[:])
}

// Parse checks a token's shape and checksum without any I/O and returns its
// kind. It returns ErrInvalidToken for anything else.
func Parse(raw string) (Kind, error) {
	var kind Kind
	var body string
	switch {
	case strings.HasPrefix(raw, userPrefix):
		kind, body = KindUser, raw[len(userPrefix):]
	case strings.HasPrefix(raw, agentPrefix):
		kind, body = KindAgent, raw[len(agentPrefix):]
	default:
		return "", ErrInvalidToken
	}
	if len(body) != bodyLen {
		return "", ErrInvalidToken
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return "", ErrInvalidToken
		}
	}
	if checksum(body[:randomLen]) != body[randomLen:] {
		return "", ErrInvalidToken
	}
	return kind, nil
}

// digest is what the database stores for a token.
func digest(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}
