package quota

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strings"
)

// TempNames mints the names of Kiln's temporary entries in a server's
// root and tells them from look-alikes (doc.go, "Kiln's names"): a name
// is TempPrefix, a body, "-" and a tag, the tag being the first 64 bits
// of HMAC-SHA256(key, body) in hex. Users never see the key (it is
// derived from the instance's secret key), so a name a user or a game
// server made with the prefix is not Kiln's, and Kiln neither removes it
// as a leftover nor runs what it holds (a restore journal). The zero
// value has no key: its names are Kiln's to nobody (Ours is always
// false), for trees Kiln never leaves leftovers in.
type TempNames struct {
	key []byte
}

// tagLen is the tag's length in hex digits (64 bits).
const tagLen = 16

// NewTempNames returns the names of key (at least 32 bytes, secret).
func NewTempNames(key []byte) TempNames {
	return TempNames{key: append([]byte(nil), key...)}
}

// Name is the name of Kiln's temporary entry of body (a plain name: no
// "/", no NUL, at most 200 bytes).
func (n TempNames) Name(body string) string {
	return TempPrefix + body + "-" + n.tag(body)
}

func (n TempNames) tag(body string) string {
	m := hmac.New(sha256.New, n.key)
	m.Write([]byte("kiln temp name\x00"))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))[:tagLen]
}

// Ours reports whether name is one Name made with this key.
func (n TempNames) Ours(name string) bool {
	if len(n.key) == 0 {
		return false
	}
	rest, ok := strings.CutPrefix(name, TempPrefix)
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 || len(rest)-i-1 != tagLen {
		return false
	}
	want := n.tag(rest[:i])
	return hmac.Equal([]byte(rest[i+1:]), []byte(want))
}

// MAC returns an HMAC-SHA256 under this key for a record Kiln writes in
// a root and must later trust (a restore journal), bound to purpose and
// to the name of the entry that holds it: a record copied into another
// entry does not verify there.
func (n TempNames) MAC(purpose, name string) hash.Hash {
	m := hmac.New(sha256.New, n.key)
	m.Write([]byte("kiln record\x00" + purpose + "\x00" + name + "\x00"))
	return m
}

// Reserved reports whether a name (one path segment) is in Kiln's
// namespace: users may not create, write, rename or change entries so
// named (whoever made them).
func Reserved(name string) bool { return strings.HasPrefix(name, TempPrefix) }
