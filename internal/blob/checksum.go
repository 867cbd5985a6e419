package blob

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
)

// ErrChecksum is returned (wrapped) by a Put whose bytes, as the store
// wrote them or as the S3 server received them, do not match their
// checksum: nothing was stored.
var ErrChecksum = errors.New("the blob's bytes do not match their checksum")

// castagnoli is CRC-32C's table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the CRC-32C (Castagnoli) of p: the checksum Checked takes.
func CRC32C(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Checked is the body of a Put together with the CRC-32C of its bytes as
// the caller made them (CRC32C). The store checks the bytes it writes (the
// file backend, as it writes them) or sends (the S3 backend, before the
// request; the server checks them again on arrival) against crc, and a
// Put whose bytes differ fails with ErrChecksum and stores nothing. Any
// Put takes a plain reader too: then only the S3 backend checks, with a
// checksum of the bytes it sends.
func Checked(r io.Reader, crc uint32) io.Reader { return &checked{r: r, crc: crc} }

// checked is Checked's reader. It reads as r does, so a Store that knows
// nothing of it (another package's wrapper) stores r's bytes unchecked.
type checked struct {
	r   io.Reader
	crc uint32
}

func (c *checked) Read(p []byte) (int, error) { return c.r.Read(p) }

// unwrapChecked returns the reader a Put was given and the checksum it
// carries (ok false: none).
func unwrapChecked(r io.Reader) (body io.Reader, crc uint32, ok bool) {
	if c, isChecked := r.(*checked); isChecked {
		return c.r, c.crc, true
	}
	return r, 0, false
}

// crcWriter writes to w and hashes what it writes, as it writes it.
type crcWriter struct {
	w   io.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	return n, err
}

// crc32cBase64 is crc as S3's x-amz-checksum-crc32c header carries it: the
// big-endian bytes, base64.
func crc32cBase64(crc uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	return base64.StdEncoding.EncodeToString(b[:])
}
