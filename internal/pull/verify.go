package pull

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"io"
	"regexp"

	"github.com/kilnhq/kiln/internal/validate"
)

// Checksum is the digest a download must have to be kept (a catalog's
// published hash). The zero value checks nothing.
type Checksum struct {
	// Algorithm is "sha1", "sha256", "sha512" or "md5".
	Algorithm string
	// Hex is the expected digest, lower-case hex.
	Hex string
}

var hexRe = regexp.MustCompile(`^[0-9a-f]+$`)

// hashLen is each algorithm's digest length in hex characters.
var hashLen = map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}

// StartVerified is Start for a file whose digest is known: the body is
// hashed as it is written and, when it ends with another digest, the
// download fails ("the file's sha512 is …, expected …") and its temporary
// file is removed: nothing replaces the target. Errors: those of Start,
// and a *validate.Error ("checksum") for an unknown algorithm or a digest
// of the wrong form.
func (m *Manager) StartVerified(ctx context.Context, teamID, serverID, rawURL, directory, filename string, sum Checksum) (Download, error) {
	if n, ok := hashLen[sum.Algorithm]; !ok || len(sum.Hex) != n || !hexRe.MatchString(sum.Hex) {
		return Download{}, validate.Errorf("checksum", "must be a lower-case hex md5, sha1, sha256 or sha512 digest")
	}
	return m.start(ctx, teamID, serverID, rawURL, directory, filename, sum)
}

// verifying hashes what passes through it and, at the end of the body,
// turns io.EOF into a failure when the digest is not the expected one, so
// that WriteFileTemp never commits the file.
type verifying struct {
	r   io.Reader
	h   hash.Hash
	sum Checksum
}

func newVerifying(r io.Reader, sum Checksum) io.Reader {
	if sum.Hex == "" {
		return r
	}
	var h hash.Hash
	switch sum.Algorithm {
	case "md5":
		h = md5.New()
	case "sha1":
		h = sha1.New()
	case "sha256":
		h = sha256.New()
	default:
		h = sha512.New()
	}
	return &verifying{r: r, h: h, sum: sum}
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		got := hex.EncodeToString(v.h.Sum(nil))
		if subtle.ConstantTimeCompare([]byte(got), []byte(v.sum.Hex)) != 1 {
			return n, failf("the file's %s is %s, the catalog published %s: the file was not kept", v.sum.Algorithm, got, v.sum.Hex)
		}
	}
	return n, err
}
