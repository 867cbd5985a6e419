package slp

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestVarInt(t *testing.T) {
	tests := []struct {
		name string
		v    int32
		enc  []byte
	}{
		{"zero", 0, []byte{0x00}},
		{"one", 1, []byte{0x01}},
		{"largest one byte", 127, []byte{0x7f}},
		{"smallest two bytes", 128, []byte{0x80, 0x01}},
		{"255", 255, []byte{0xff, 0x01}},
		{"default port", 25565, []byte{0xdd, 0xc7, 0x01}},
		{"largest three bytes", 2097151, []byte{0xff, 0xff, 0x7f}},
		{"max int32", 2147483647, []byte{0xff, 0xff, 0xff, 0xff, 0x07}},
		{"minus one", -1, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"min int32", -2147483648, []byte{0x80, 0x80, 0x80, 0x80, 0x08}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AppendVarInt(nil, tt.v); !bytes.Equal(got, tt.enc) {
				t.Errorf("AppendVarInt(%d) = % x, want % x", tt.v, got, tt.enc)
			}
			if got := varIntLen(tt.v); got != len(tt.enc) {
				t.Errorf("varIntLen(%d) = %d, want %d", tt.v, got, len(tt.enc))
			}
			r := bytes.NewReader(tt.enc)
			got, err := ReadVarInt(r)
			if err != nil || got != tt.v {
				t.Errorf("ReadVarInt(% x) = %d, %v, want %d, nil", tt.enc, got, err, tt.v)
			}
			if r.Len() != 0 {
				t.Errorf("ReadVarInt(% x) left %d bytes", tt.enc, r.Len())
			}
		})
	}
}

func TestReadVarIntErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"truncated", []byte{0x80}, io.ErrUnexpectedEOF},
		{"truncated at four", []byte{0xff, 0xff, 0xff, 0xff}, io.ErrUnexpectedEOF},
		{"six bytes", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrVarIntTooLong},
		{"six zero bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, ErrVarIntTooLong},
		{"fifth byte past 32 bits", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, ErrVarIntTooLong},
		{"endless", bytes.Repeat([]byte{0xff}, 1000), ErrVarIntTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(tt.in)
			got, err := ReadVarInt(r)
			if !errors.Is(err, tt.want) {
				t.Errorf("ReadVarInt(% x) = %d, %v, want error %v", tt.in, got, err, tt.want)
			}
			if read := len(tt.in) - r.Len(); read > 5 {
				t.Errorf("ReadVarInt(% x) read %d bytes, want at most 5", tt.in, read)
			}
		})
	}
}

func TestReadVarIntNonMinimal(t *testing.T) {
	in := []byte{0x80, 0x80, 0x00}
	if got, err := ReadVarInt(bytes.NewReader(in)); got != 0 || err != nil {
		t.Errorf("ReadVarInt(% x) = %d, %v, want 0, nil", in, got, err)
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		name     string
		in       []byte
		maxChars int
		want     string
		err      error
	}{
		{"empty", AppendString(nil, ""), 10, "", nil},
		{"ascii", AppendString(nil, "localhost"), 255, "localhost", nil},
		{"at limit", AppendString(nil, "abcd"), 4, "abcd", nil},
		{"over limit", AppendString(nil, "abcde"), 4, "", ErrStringTooLong},
		{"surrogate pair counts two", AppendString(nil, "😀"), 2, "😀", nil},
		{"surrogate pair over limit", AppendString(nil, "😀a"), 2, "", ErrStringTooLong},
		{"three-byte runes at limit", AppendString(nil, "§§"), 2, "§§", nil},
		{"byte length over 3× limit", append(AppendVarInt(nil, 13), "x"...), 4, "", ErrStringTooLong},
		{"huge length", append(AppendVarInt(nil, 2147483647), "x"...), 32767, "", ErrStringTooLong},
		{"negative length", append(AppendVarInt(nil, -1), "x"...), 10, "", ErrMalformed},
		{"truncated", append(AppendVarInt(nil, 5), "abc"...), 10, "", io.ErrUnexpectedEOF},
		{"invalid utf-8 replaced", AppendString(nil, "a\xffb"), 10, "a\uFFFDb", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadString(bytes.NewReader(tt.in), tt.maxChars)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("ReadString(% x, %d) = %q, %v, want error %v", tt.in, tt.maxChars, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ReadString(% x, %d) = %q, %v, want %q, nil", tt.in, tt.maxChars, got, err, tt.want)
			}
		})
	}
}

func frame(b ...[]byte) []byte { return bytes.Join(b, nil) }

func TestReadPacket(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		maxLen int
		want   Packet
		err    error
	}{
		{"status request", []byte{0x01, 0x00}, 64, Packet{ID: 0, Data: []byte{}}, nil},
		{"ping", frame([]byte{0x09, 0x01}, []byte{1, 2, 3, 4, 5, 6, 7, 8}), 64, Packet{ID: 1, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}, nil},
		{"two-byte id", []byte{0x03, 0x80, 0x01, 0xaa}, 64, Packet{ID: 128, Data: []byte{0xaa}}, nil},
		{"at limit", frame([]byte{0x04, 0x00}, []byte("abc")), 4, Packet{ID: 0, Data: []byte("abc")}, nil},
		{"large packet", frame(AppendVarInt(nil, 10001), []byte{0x00}, bytes.Repeat([]byte{'x'}, 10000)), MaxPacketLen, Packet{ID: 0, Data: bytes.Repeat([]byte{'x'}, 10000)}, nil},
		{"empty input", nil, 64, Packet{}, io.EOF},
		{"zero length", []byte{0x00}, 64, Packet{}, ErrMalformed},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x00}, 64, Packet{}, ErrMalformed},
		{"over limit", frame([]byte{0x05, 0x00}, []byte("abcd")), 4, Packet{}, ErrPacketTooLarge},
		{"huge length prefix", []byte{0xff, 0xff, 0xff, 0xff, 0x07, 0x00}, MaxPacketLen, Packet{}, ErrPacketTooLarge},
		{"limit above protocol maximum", frame(AppendVarInt(nil, MaxPacketLen+1), []byte{0x00}), 1 << 30, Packet{}, ErrPacketTooLarge},
		{"over-long length", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 64, Packet{}, ErrVarIntTooLong},
		{"truncated length", []byte{0x80}, 64, Packet{}, io.ErrUnexpectedEOF},
		{"truncated body", []byte{0x05, 0x00, 0x01}, 64, Packet{}, io.ErrUnexpectedEOF},
		{"truncated large body", frame(AppendVarInt(nil, 100000), []byte{0x00, 0x01}), MaxPacketLen, Packet{}, io.ErrUnexpectedEOF},
		{"id runs past length", []byte{0x01, 0x80, 0x01}, 64, Packet{}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadPacket(bytes.NewReader(tt.in), tt.maxLen)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("ReadPacket(% x, %d) = %+v, %v, want error %v", trim(tt.in), tt.maxLen, got, err, tt.err)
				}
				return
			}
			if err != nil || got.ID != tt.want.ID || !bytes.Equal(got.Data, tt.want.Data) {
				t.Errorf("ReadPacket(% x, %d) = %+v, %v, want %+v, nil", trim(tt.in), tt.maxLen, got, err, tt.want)
			}
		})
	}
}

// trim shortens input for failure messages.
func trim(b []byte) []byte { return b[:min(len(b), 32)] }

func TestWritePacket(t *testing.T) {
	var buf bytes.Buffer
	p := Packet{ID: 0x01, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	if err := WritePacket(&buf, p); err != nil {
		t.Fatalf("WritePacket(%+v) = %v", p, err)
	}
	want := frame([]byte{0x09, 0x01}, p.Data)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("WritePacket(%+v) wrote % x, want % x", p, buf.Bytes(), want)
	}

	big := Packet{ID: 0, Data: make([]byte, MaxPacketLen)}
	if err := WritePacket(io.Discard, big); !errors.Is(err, ErrPacketTooLarge) {
		t.Errorf("WritePacket(%d bytes) = %v, want %v", len(big.Data), err, ErrPacketTooLarge)
	}
}

// A peer that announces a large packet and sends little must not make
// ReadPacket allocate what it announced.
func TestReadPacketLyingLengthAllocatesLittle(t *testing.T) {
	in := frame(AppendVarInt(nil, MaxPacketLen), []byte{0x00}, []byte(strings.Repeat("x", 100)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadPacket(bytes.NewReader(in), MaxPacketLen)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadPacket(length %d, 101 bytes) = %v, want %v", MaxPacketLen, err, io.ErrUnexpectedEOF)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("ReadPacket(length %d, 101 bytes) allocated %d bytes, want under 64 KiB", MaxPacketLen, got)
	}
}
