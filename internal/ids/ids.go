package ids

import (
	"crypto/rand"
	"strings"
)

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// RandomBase62 returns n characters drawn uniformly from [0-9A-Za-z] with
// crypto/rand (rejection sampling, so no character is favoured).
func RandomBase62(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2+8)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			// crypto/rand.Read never fails on supported platforms (Go 1.24+).
			panic(err)
		}
		for _, b := range buf {
			if b >= 248 { // 248 = 4*62: keep the distribution uniform
				continue
			}
			out = append(out, alphabet[b%62])
			if len(out) == n {
				break
			}
		}
	}
	return string(out)
}

// New returns prefix + "_" + 20 random base62 characters (≈119 bits).
func New(prefix string) string {
	return prefix + "_" + RandomBase62(20)
}

// HasPrefix reports whether id looks like an id made by New(prefix); it
// lets handlers refuse obviously foreign ids without a database look-up.
func HasPrefix(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"_")
	if !ok || len(rest) != 20 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(alphabet, rest[i]) < 0 {
			return false
		}
	}
	return true
}
