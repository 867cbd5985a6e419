package catalog

import (
	"crypto/md5"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Player is one entry of an OPS or WHITELIST variable: a player name and,
// when the entry gave one (name:uuid), the player's UUID.
type Player struct {
	Name string
	UUID string // canonical 8-4-4-4-12 lower-case form, or ""
}

// maxPlayers bounds one list; a longer one is surely a mistake.
const maxPlayers = 1000

// ParsePlayers reads a comma-separated list of players: each entry is a
// name (1–16 of A–Z, a–z, 0–9, _: what Minecraft accepts) or name:uuid
// (the UUID with or without dashes). Blanks around entries are ignored,
// an empty list is nil, and a name listed twice (in any case) is an
// error.
func ParsePlayers(s string) ([]Player, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Player
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		name, id, hasID := strings.Cut(entry, ":")
		if !validPlayerName(name) {
			return nil, fmt.Errorf("%q is not a player name (1-16 letters, digits or _, optionally followed by :uuid)", entry)
		}
		p := Player{Name: name}
		if hasID {
			u, err := uuid.Parse(id)
			if err != nil || len(id) != 32 && len(id) != 36 {
				return nil, fmt.Errorf("%q: %q is not a UUID", name, id)
			}
			p.UUID = u.String()
		}
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("%q is listed twice", name)
		}
		seen[strings.ToLower(name)] = true
		out = append(out, p)
	}
	if len(out) > maxPlayers {
		return nil, errors.New("lists more than 1000 players")
	}
	return out, nil
}

func validPlayerName(n string) bool {
	if n == "" || len(n) > 16 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// OfflineUUID is the UUID a server in offline mode (online-mode=false)
// gives the player name: the name-based (version 3, MD5) UUID of
// "OfflinePlayer:<name>", as Java's UUID.nameUUIDFromBytes computes it
// (no namespace).
func OfflineUUID(name string) string {
	h := md5.Sum([]byte("OfflinePlayer:" + name))
	h[6] = h[6]&0x0f | 0x30
	h[8] = h[8]&0x3f | 0x80
	return uuid.UUID(h).String()
}
