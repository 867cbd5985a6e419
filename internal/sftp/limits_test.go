package sftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/synctest"
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
	c := newLimitsConn(ch, 261120, 256, 8)

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

// TestLimitsConnBoundsInFlight: at most maxInFlight requests reach
// pkg/sftp before it answers one; each packet it sends lets one more
// through, and a closed connection ends the wait (synctest: the reader is
// seen blocked, not guessed so after a sleep).
func TestLimitsConnBoundsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var in []byte
		for i := range 5 {
			in = append(in, packet(5, binary.BigEndian.AppendUint32(nil, uint32(i)))...)
		}
		c := newLimitsConn(&fakeChannel{in: bytes.NewReader(in)}, 261120, 256, 2)
		reqLen := len(in) / 5
		got := make(chan []byte, 1)
		next := func() {
			go func() {
				b := make([]byte, reqLen)
				if _, err := io.ReadFull(c, b); err != nil {
					b = nil
				}
				got <- b
			}()
		}
		for want := range 2 {
			next()
			if b := <-got; b == nil || binary.BigEndian.Uint32(b[5:]) != uint32(want) {
				t.Fatalf("read %x, want request %d", b, want)
			}
		}
		next()
		synctest.Wait()
		select {
		case b := <-got:
			t.Fatalf("a third request %x passed with two unanswered (maxInFlight 2)", b)
		default:
		}
		if _, err := c.Write(packet(101, make([]byte, 12))); err != nil {
			t.Fatal(err)
		}
		if b := <-got; b == nil || binary.BigEndian.Uint32(b[5:]) != 2 {
			t.Fatalf("after one answer, read %x, want request 2", b)
		}
		next()
		synctest.Wait()
		c.Close()
		if b := <-got; b != nil {
			t.Fatalf("after Close, read %x, want an error", b)
		}
	})
}

// TestSessionLimits: logged-in sessions are bounded per credential, per
// team (one team's logins on many servers cannot take the node's) and
// per node; a session that ends frees its place in all three.
func TestSessionLimits(t *testing.T) {
	g := newRegistry()
	lim := sessionLimits{perCred: 2, perTeam: 3, total: 4}
	mk := func(cred, team string) *session {
		return &session{cred: credRow{id: cred, teamID: team, serverID: "srv-" + cred}, close: func(string) {}}
	}
	var a []*session
	for _, c := range []string{"a1", "a1", "a2"} {
		se := mk(c, "team_a")
		if err := g.add(se, lim); err != nil {
			t.Fatalf("session %d of team a = %v", len(a)+1, err)
		}
		a = append(a, se)
	}
	if err := g.add(mk("a1", "team_a"), lim); !errors.Is(err, errTooManySessions) {
		t.Errorf("a third session of one login = %v, want errTooManySessions", err)
	}
	if err := g.add(mk("a3", "team_a"), lim); !errors.Is(err, errTeamSessions) {
		t.Errorf("a fourth session of one team = %v, want errTeamSessions", err)
	}
	if err := g.add(mk("b1", "team_b"), lim); err != nil {
		t.Errorf("another team's session = %v, want it let in", err)
	}
	if err := g.add(mk("c1", "team_c"), lim); !errors.Is(err, errNodeSessions) {
		t.Errorf("a fifth session on the node = %v, want errNodeSessions", err)
	}
	g.remove(a[0])
	if err := g.add(mk("c1", "team_c"), lim); err != nil {
		t.Errorf("a session once one ended = %v, want it let in", err)
	}
	if err := g.add(mk("a3", "team_a"), lim); !errors.Is(err, errNodeSessions) {
		t.Errorf("team a again on a full node = %v, want errNodeSessions", err)
	}
	if n := g.byTeam["team_a"]; n != 2 {
		t.Errorf("team a's count after one of its sessions ended = %d, want 2", n)
	}
}
