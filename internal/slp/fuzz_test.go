package slp

import (
	"bytes"
	"testing"
)

// FuzzReadPacket feeds arbitrary bytes to the framing decoder. It must not
// panic or exceed its limit, and a packet it accepts must survive a write
// and a read unchanged. Seeds live in testdata/fuzz/FuzzReadPacket.
func FuzzReadPacket(f *testing.F) {
	const maxLen = 1024
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		p, err := ReadPacket(r, maxLen)
		if err != nil {
			return
		}
		if n := varIntLen(p.ID) + len(p.Data); n > maxLen {
			t.Fatalf("ReadPacket(% x) = %d-byte packet, limit %d", trim(in), n, maxLen)
		}
		if consumed := len(in) - r.Len(); consumed < 1+len(p.Data) {
			t.Fatalf("ReadPacket(% x) consumed %d bytes for %d bytes of data", trim(in), consumed, len(p.Data))
		}
		var buf bytes.Buffer
		if err := WritePacket(&buf, p); err != nil {
			t.Fatalf("WritePacket(%+v) = %v", p, err)
		}
		again, err := ReadPacket(&buf, maxLen)
		if err != nil || again.ID != p.ID || !bytes.Equal(again.Data, p.Data) {
			t.Fatalf("ReadPacket(WritePacket(%+v)) = %+v, %v", p, again, err)
		}
		// A handshake decoder given the data must not panic either.
		_, _ = parseHandshake(p.Data)
	})
}

func FuzzVarInt(f *testing.F) {
	for _, s := range [][]byte{{0x00}, {0x7f}, {0x80, 0x01}, {0xff, 0xff, 0xff, 0xff, 0x0f}, {0xff, 0xff, 0xff, 0xff, 0x1f}, {0x80, 0x80, 0x80, 0x80, 0x80, 0x01}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		v, err := ReadVarInt(r)
		if consumed := len(in) - r.Len(); consumed > 5 {
			t.Fatalf("ReadVarInt(% x) consumed %d bytes", trim(in), consumed)
		}
		if err != nil {
			return
		}
		enc := AppendVarInt(nil, v)
		if got, err := ReadVarInt(bytes.NewReader(enc)); err != nil || got != v {
			t.Fatalf("ReadVarInt(AppendVarInt(%d)) = %d, %v", v, got, err)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	for _, s := range []string{
		`{"version":{"name":"Paper 1.21.4","protocol":769},"players":{"max":100,"online":5},"description":{"text":"MOTD"}}`,
		`{"description":[{"text":"a","extra":["b",{"text":"§lc"}]},1,true]}`,
		`{"description":"§"}`,
		`[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		_, _ = parseStatus([]byte(js))
	})
}
