package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/kilnhq/kiln/internal/ids"
)

// tokenPrefix starts every join token: "KILN", and the format's version.
const tokenPrefix = "KILN1"

// secretLen is the length of a join token's secret: 43 base62 characters,
// about 256 bits.
const secretLen = 43

// nameRE is what a node name may be: it is stored on every server, in the
// node's certificate and in the API.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName says whether name may name a node.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("node name %q: want 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ErrMalformedToken: a text that is no join token.
var ErrMalformedToken = errors.New("not a Kiln join token (want KILN1<64 hex>::<node>:<secret>, as kiln admin node add prints it)")

// JoinToken is what `kiln admin node add` prints, in the manner of k3s's
// "K10<ca-hash>::<credentials>" tokens: KILN1, the SHA-256 fingerprint of
// the cluster CA's certificate (64 hex), "::", the node's name, ":", and a
// secret of 43 base62 characters. The fingerprint lets the agent
// authenticate the control plane before it sends the rest; the control
// plane keeps only the secret's digest (Digest).
type JoinToken struct {
	CAFingerprint string
	Node          string
	Secret        string
}

// NewJoinToken makes a token for node with a fresh secret.
func NewJoinToken(caFingerprint, node string) JoinToken {
	return JoinToken{CAFingerprint: caFingerprint, Node: node, Secret: ids.RandomBase62(secretLen)}
}

// String is the token as printed and given to kiln agent.
func (t JoinToken) String() string {
	return tokenPrefix + t.CAFingerprint + "::" + t.Node + ":" + t.Secret
}

// LogValue keeps the secret out of logs.
func (t JoinToken) LogValue() slog.Value {
	return slog.GroupValue(slog.String("node", t.Node), slog.String("ca_fingerprint", t.CAFingerprint))
}

// Digest is the hex SHA-256 of the secret: what the control plane stores.
// The secret is 256 random bits, so a plain hash keeps it from anyone
// reading the database without making it guessable.
func (t JoinToken) Digest() string {
	sum := sha256.Sum256([]byte(t.Secret))
	return hex.EncodeToString(sum[:])
}

// ParseJoinToken reads a token (surrounding white space ignored). Errors:
// ErrMalformedToken.
func ParseJoinToken(s string) (JoinToken, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok || len(rest) < 64+2 {
		return JoinToken{}, ErrMalformedToken
	}
	fp, rest := rest[:64], rest[64:]
	if !isLowerHex(fp) {
		return JoinToken{}, ErrMalformedToken
	}
	rest, ok = strings.CutPrefix(rest, "::")
	if !ok {
		return JoinToken{}, ErrMalformedToken
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return JoinToken{}, ErrMalformedToken
	}
	node, secret := rest[:i], rest[i+1:]
	if ValidName(node) != nil || len(secret) != secretLen || !isBase62(secret) {
		return JoinToken{}, ErrMalformedToken
	}
	return JoinToken{CAFingerprint: fp, Node: node, Secret: secret}, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}
