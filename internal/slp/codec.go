package slp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Limits of the wire format.
const (
	// MaxPacketLen is the largest packet length (packet ID plus data) the
	// protocol can frame: the length prefix of an uncompressed packet is at
	// most a three-byte VarInt.
	MaxPacketLen = 1<<21 - 1
	// MaxStatusLen is the longest Status Response JSON, in UTF-16 code
	// units, that the vanilla client accepts.
	MaxStatusLen = 32767
)

// Errors for input that breaks the protocol. ErrVarIntTooLong,
// ErrPacketTooLarge and ErrStringTooLong all wrap ErrMalformed, so
// errors.Is(err, ErrMalformed) tells "the peer does not speak the protocol"
// from network errors.
var (
	ErrMalformed      = errors.New("malformed packet")
	ErrVarIntTooLong  = fmt.Errorf("%w: varint longer than 5 bytes or past 32 bits", ErrMalformed)
	ErrPacketTooLarge = fmt.Errorf("%w: packet too large", ErrMalformed)
	ErrStringTooLong  = fmt.Errorf("%w: string too long", ErrMalformed)
)

// Reader is what the decoders read from: a bufio.Reader on a connection or
// a bytes.Reader on a packet's data. VarInts are read a byte at a time.
type Reader interface {
	io.Reader
	io.ByteReader
}

// Packet is one frame: its ID and the bytes after the ID.
type Packet struct {
	ID   int32
	Data []byte
}

// ReadVarInt reads a VarInt: seven bits per byte, low group first, the high
// bit set on every byte but the last. It returns ErrVarIntTooLong for a
// sixth byte or a fifth byte carrying bits past the 32nd, io.EOF if r ends
// before the first byte and io.ErrUnexpectedEOF if it ends inside the
// VarInt. Non-minimal encodings (0x80 0x00 for 0) are accepted, as vanilla
// accepts them.
func ReadVarInt(r io.ByteReader) (int32, error) {
	var v uint32
	for i := range 5 {
		b, err := r.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if i == 4 && b > 0x0f {
			return 0, ErrVarIntTooLong
		}
		v |= uint32(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
	}
	return int32(v), nil
}

// AppendVarInt appends the minimal VarInt encoding of v to b: one to five
// bytes, negative numbers always five.
func AppendVarInt(b []byte, v int32) []byte {
	u := uint32(v)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// varIntLen is len(AppendVarInt(nil, v)).
func varIntLen(v int32) int {
	n := 1
	for u := uint32(v); u >= 0x80; u >>= 7 {
		n++
	}
	return n
}

// ReadString reads a String: a VarInt byte length then UTF-8. maxChars is
// the protocol's limit for the field in UTF-16 code units; like vanilla, a
// byte length over 3×maxChars is refused before anything is allocated, and
// the decoded string is then held to maxChars (ErrStringTooLong). Invalid
// UTF-8 becomes U+FFFD, as Java's decoder does, so an odd MOTD does not
// make a working server look broken.
func ReadString(r Reader, maxChars int) (string, error) {
	n, err := ReadVarInt(r)
	if err != nil {
		return "", fmt.Errorf("read string length: %w", err)
	}
	if n < 0 {
		return "", fmt.Errorf("%w: string length %d", ErrMalformed, n)
	}
	if int64(n) > 3*int64(maxChars) {
		return "", fmt.Errorf("%w: %d bytes, limit %d characters", ErrStringTooLong, n, maxChars)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", fmt.Errorf("read string: %w", unexpected(err))
	}
	s := string(buf)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if n := utf16Len(s); n > maxChars {
		return "", fmt.Errorf("%w: %d characters, limit %d", ErrStringTooLong, n, maxChars)
	}
	return s, nil
}

// AppendString appends s as a String. It does not check a limit: writers
// build their strings and know them.
func AppendString(b []byte, s string) []byte {
	b = AppendVarInt(b, int32(len(s)))
	return append(b, s...)
}

// utf16Len is the length of s in UTF-16 code units, the unit of the
// protocol's string limits (Java strings).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// ReadPacket reads one frame, Length VarInt | PacketID VarInt | data. A
// length over maxLen (at most MaxPacketLen) is refused with
// ErrPacketTooLarge before any buffer is allocated, and a large declared
// length is read into a buffer that grows with the bytes that really
// arrive, so a peer cannot make us allocate by lying. It returns io.EOF
// (wrapped) if r ends before the frame starts and io.ErrUnexpectedEOF
// inside it.
func ReadPacket(r Reader, maxLen int) (Packet, error) {
	n, err := ReadVarInt(r)
	if err != nil {
		return Packet{}, fmt.Errorf("read packet length: %w", err)
	}
	if n < 1 {
		return Packet{}, fmt.Errorf("%w: packet length %d", ErrMalformed, n)
	}
	if int(n) > min(maxLen, MaxPacketLen) {
		return Packet{}, fmt.Errorf("%w: %d bytes, limit %d", ErrPacketTooLarge, n, min(maxLen, MaxPacketLen))
	}
	var body []byte
	if n <= smallPacket {
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return Packet{}, fmt.Errorf("read packet: %w", unexpected(err))
		}
	} else {
		var buf bytes.Buffer
		buf.Grow(smallPacket)
		got, err := io.CopyN(&buf, r, int64(n))
		if got < int64(n) {
			return Packet{}, fmt.Errorf("read packet: %w", unexpected(err))
		}
		body = buf.Bytes()
	}
	br := bytes.NewReader(body)
	id, err := ReadVarInt(br)
	if err != nil {
		return Packet{}, fmt.Errorf("%w: packet id: %w", ErrMalformed, err)
	}
	return Packet{ID: id, Data: body[len(body)-br.Len():]}, nil
}

// smallPacket is the largest packet read into a buffer of its declared
// length at once; anything longer grows with the data.
const smallPacket = 4096

// WritePacket writes p as one frame in a single Write, so frames from one
// writer never interleave. It returns ErrPacketTooLarge for a packet the
// protocol cannot frame.
func WritePacket(w io.Writer, p Packet) error {
	b, err := appendPacket(nil, p)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func appendPacket(b []byte, p Packet) ([]byte, error) {
	n := varIntLen(p.ID) + len(p.Data)
	if n > MaxPacketLen {
		return b, fmt.Errorf("%w: %d bytes, limit %d", ErrPacketTooLarge, n, MaxPacketLen)
	}
	b = AppendVarInt(b, int32(n))
	b = AppendVarInt(b, p.ID)
	return append(b, p.Data...), nil
}

// unexpected turns io.EOF inside a value into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// malformedEOF turns running out of a packet's data into ErrMalformed: the
// frame was complete, so a short field is the peer's error, not the
// network's.
func malformedEOF(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s truncated", ErrMalformed, what)
	}
	return fmt.Errorf("%s: %w", what, err)
}
