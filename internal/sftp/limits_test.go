package sftp

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// fakeChannel records writes and serves reads from a buffer.
type fakeChannel struct {
	in     *bytes.Reader
	writes [][]byte
}

func (f *fakeChannel) Read(p []byte) (int, error) { return f.in.Read(p) }
func (f *fakeChannel) Write(p []byte) (int, error) {
	f.writes = append(f.writes, bytes.Clone(p))
	return len(p), nil
}
func (f *fakeChannel) Close() error { return nil }

func packet(typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(body)))
	return append(append(b, typ), body...)
}

func extended(id uint32, name string, rest []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	return packet(fxpExtended, append(append(b, name...), rest...))
}

// TestLimitsConn: the limits request is answered and never reaches
// pkg/sftp, other packets pass unchanged, the VERSION packet gains the
// extension, and a packet written in pieces goes out in one write.
func TestLimitsConn(t *testing.T) {
	open := packet(3, []byte("open-request"))
	other := extended(7, "statvfs@openssh.com", []byte("/x"))
	in := append(append(append([]byte{}, open...), extended(9, limitsExt, nil)...), other...)
	ch := &fakeChannel{in: bytes.NewReader(in)}
	c := newLimitsConn(ch, 261120, 256)

	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, open...), other...); !bytes.Equal(got, want) {
		t.Errorf("passed on %q, want %q", got, want)
	}
	if len(ch.writes) != 1 {
		t.Fatalf("%d writes for one limits request, want 1 reply", len(ch.writes))
	}
	r := ch.writes[0]
	if len(r) != 4+1+4+32 || r[4] != fxpExtendedReply || binary.BigEndian.Uint32(r[5:]) != 9 ||
		binary.BigEndian.Uint64(r[9+8:]) != 261120 || binary.BigEndian.Uint64(r[9+24:]) != 256 {
		t.Errorf("limits reply %x", r)
	}

	ch.writes = nil
	version := packet(fxpVersion, []byte{0, 0, 0, 3})
	if _, err := c.Write(version[:3]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(version[3:]); err != nil {
		t.Fatal(err)
	}
	data := packet(103, bytes.Repeat([]byte("d"), 40000))
	c.Write(data[:13])
	c.Write(data[13:])
	if len(ch.writes) != 2 {
		t.Fatalf("%d writes for two packets, want 2", len(ch.writes))
	}
	v := ch.writes[0]
	if binary.BigEndian.Uint32(v) != uint32(len(v)-4) || !bytes.Contains(v, []byte(limitsExt)) || !bytes.HasSuffix(v, []byte{0, 0, 0, 1, '1'}) {
		t.Errorf("VERSION packet %q lacks the limits extension", v)
	}
	if !bytes.Equal(ch.writes[1], data) {
		t.Errorf("data packet changed on the way")
	}
}
