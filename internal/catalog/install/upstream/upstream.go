package upstream

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrVersionNotFound is returned when the upstream does not have the
// requested version, build or loader version (or has no stable build of
// it).
var ErrVersionNotFound = errors.New("version not found")

// ChecksumError reports a download whose content does not match what the
// upstream published. Nothing of it was kept.
type ChecksumError struct {
	URL  string // upstream URL of the artifact
	Algo string // sha256, sha1, md5, or size
	Want string
	Got  string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s of %s is %s, upstream published %s", e.Algo, e.URL, e.Got, e.Want)
}

// Artifact is one file to fetch: its upstream URL and every checksum the
// upstream publishes for it (algorithm → lower-case hex).
type Artifact struct {
	URL  string
	Size int64 // 0 when not published
	Sums map[string]string
}

// Strongest returns the strongest published checksum algorithm, "" for
// none.
func (a Artifact) Strongest() string {
	for _, algo := range []string{"sha256", "sha1", "md5"} {
		if a.Sums[algo] != "" {
			return algo
		}
	}
	return ""
}

// ValidToken reports whether s may be a version, build or loader version:
// it goes into upstream URL paths, so no "/", no "..", printable ASCII.
func ValidToken(s string) bool {
	if s == "" || len(s) > 64 || strings.Contains(s, "..") {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '.' || r == '-' || r == '_' || r == '+' || r == ' '):
		default:
			return false
		}
	}
	return true
}

// IsHex reports whether s is n hexadecimal digits.
func IsHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// notFound wraps ErrVersionNotFound with what was looked for.
func notFound(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrVersionNotFound)
}

// IsStatus reports whether err is a *StatusError with that status.
func IsStatus(err error, status int) bool {
	ue, ok := errors.AsType[*StatusError](err)
	return ok && ue.Status == status
}

// validPath reports whether a relative path from an upstream answer is safe
// to put into a URL path: segments of ValidToken characters.
func validPath(p string) bool {
	if p == "" || p[0] == '/' {
		return false
	}
	start := 0
	for k := 0; k <= len(p); k++ {
		if k == len(p) || p[k] == '/' {
			if !ValidToken(p[start:k]) {
				return false
			}
			start = k + 1
		}
	}
	return true
}
