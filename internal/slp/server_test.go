package slp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf16"
)

// waitLimit bounds every wait in these tests; reaching it is a failure,
// never the expected path.
const waitLimit = 10 * time.Second

var testStatus = StatusResponse{
	Version:     Version{Name: "Kiln Test 1.21.4", Protocol: 769},
	Players:     Players{Max: 20, Online: 3},
	Description: "A §aKiln§r server",
	Favicon:     "data:image/png;base64,AAAA",
}

// startServer serves s on 127.0.0.1 until the test ends, then checks that
// Serve returns nil.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve() = %v, want nil after cancel", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Serve() did not return %v after cancel", waitLimit)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	return conn
}

func handshakePacket(t *testing.T, next int32) []byte {
	t.Helper()
	return handshakeWith(t, "localhost", byte(next))
}

// handshakeWith frames a Handshake for address whose data ends with tail
// (the next state, and anything after it).
func handshakeWith(t *testing.T, address string, tail ...byte) []byte {
	t.Helper()
	hs := AppendVarInt(nil, 769)
	hs = AppendString(hs, address)
	hs = binary.BigEndian.AppendUint16(hs, 25565)
	hs = append(hs, tail...)
	b, err := appendPacket(nil, Packet{ID: idHandshake, Data: hs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectClosed reads conn to its end and fails if the server did not close
// it (the read hit the test's own deadline).
func expectClosed(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	got, err := io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("server kept the connection open; read % x", trim(got))
	}
	return got
}

func TestPingServe(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }})
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()

	st, err := Ping(ctx, addr)
	if err != nil {
		t.Fatalf("Ping(%s) = %v", addr, err)
	}
	if st.Version != testStatus.Version {
		t.Errorf("Ping(%s).Version = %+v, want %+v", addr, st.Version, testStatus.Version)
	}
	if st.Players != testStatus.Players {
		t.Errorf("Ping(%s).Players = %+v, want %+v", addr, st.Players, testStatus.Players)
	}
	if want := "A Kiln server"; st.Description != want {
		t.Errorf("Ping(%s).Description = %q, want %q", addr, st.Description, want)
	}
	if st.Latency <= 0 {
		t.Errorf("Ping(%s).Latency = %v, want > 0", addr, st.Latency)
	}
	var raw map[string]any
	if err := json.Unmarshal(st.Raw, &raw); err != nil {
		t.Fatalf("Ping(%s).Raw is not JSON: %v", addr, err)
	}
	if raw["favicon"] != testStatus.Favicon {
		t.Errorf("Ping(%s).Raw favicon = %v, want %q", addr, raw["favicon"], testStatus.Favicon)
	}
	if d, _ := raw["description"].(map[string]any); d["text"] != testStatus.Description {
		t.Errorf("Ping(%s).Raw description = %v, want text %q", addr, raw["description"], testStatus.Description)
	}
}

func TestPingServeMany(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }})
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	errs := make(chan error, 20)
	for range cap(errs) {
		go func() {
			_, err := Ping(ctx, addr)
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("Ping(%s) = %v", addr, err)
		}
	}
}

// The client may skip the status request and ping straight away.
func TestServePingWithoutStatus(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }})
	conn := dial(t, addr)
	ping := frame([]byte{0x09, idPing}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if _, err := conn.Write(frame(handshakePacket(t, stateStatus), ping)); err != nil {
		t.Fatal(err)
	}
	if got := expectClosed(t, conn); !bytes.Equal(got, ping) {
		t.Errorf("reply to ping = % x, want pong % x", got, ping)
	}
}

func decodeLegacy(t *testing.T, b []byte) []string {
	t.Helper()
	if len(b) < 3 || b[0] != 0xFF {
		t.Fatalf("legacy reply % x does not start with 0xFF and a length", trim(b))
	}
	n := int(binary.BigEndian.Uint16(b[1:3]))
	if len(b) != 3+2*n {
		t.Fatalf("legacy reply has %d bytes, want 3+2×%d", len(b), n)
	}
	units := make([]uint16, n)
	for i := range units {
		units[i] = binary.BigEndian.Uint16(b[3+2*i:])
	}
	return strings.Split(string(utf16.Decode(units)), "\x00")
}

func TestServeLegacyPing(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }})
	// MC|PingHost as 1.6 sends it after 0xFE 0x01 0xFA.
	host := utf16.Encode([]rune("localhost"))
	var ph []byte
	ph = append(ph, 0xFE, 0x01, 0xFA, 0x00, 0x0B)
	for _, u := range utf16.Encode([]rune("MC|PingHost")) {
		ph = binary.BigEndian.AppendUint16(ph, u)
	}
	ph = binary.BigEndian.AppendUint16(ph, uint16(7+2*len(host)))
	ph = append(ph, 78)
	ph = binary.BigEndian.AppendUint16(ph, uint16(len(host)))
	for _, u := range host {
		ph = binary.BigEndian.AppendUint16(ph, u)
	}
	ph = binary.BigEndian.AppendUint32(ph, 25565)

	tests := []struct {
		name string
		in   []byte
	}{
		{"beta 1.8 to 1.3", []byte{0xFE}},
		{"1.4 to 1.5", []byte{0xFE, 0x01}},
		{"1.6", ph},
	}
	want := []string{"§1", "127", "Kiln Test 1.21.4", "A §aKiln§r server", "3", "20"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(t, addr)
			if _, err := conn.Write(tt.in); err != nil {
				t.Fatal(err)
			}
			got := decodeLegacy(t, expectClosed(t, conn))
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("legacy reply fields = %q, want %q", got, want)
			}
		})
	}
}

func TestServeLogin(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }})
	for _, next := range []int32{stateLogin, stateTransfer} {
		conn := dial(t, addr)
		// Login Start: name, then (1.20.2+) the player's UUID.
		start, _ := appendPacket(nil, Packet{ID: idLoginStart, Data: append(AppendString(nil, "Steve"), make([]byte, 16)...)})
		if _, err := conn.Write(frame(handshakePacket(t, next), start)); err != nil {
			t.Fatal(err)
		}
		got := expectClosed(t, conn)
		p, err := ReadPacket(bytes.NewReader(got), MaxPacketLen)
		if err != nil || p.ID != idLoginDisconnect {
			t.Fatalf("next state %d: reply % x = packet %#x, %v, want login disconnect", next, trim(got), p.ID, err)
		}
		reason, err := ReadString(bytes.NewReader(p.Data), 262144)
		if err != nil {
			t.Fatalf("next state %d: disconnect reason: %v", next, err)
		}
		var chat struct{ Text string }
		if err := json.Unmarshal([]byte(reason), &chat); err != nil || chat.Text != LoginDisconnectReason {
			t.Errorf("next state %d: disconnect reason %s, want text %q", next, reason, LoginDisconnectReason)
		}
	}
}

// Garbage is dropped at once: the server's own timeout is an hour here, so
// a close can only come from recognising the garbage.
func TestServeClosesGarbage(t *testing.T) {
	addr := startServer(t, &Server{Status: func() StatusResponse { return testStatus }, Timeout: time.Hour})
	statusThen := func(b ...byte) []byte {
		return frame(handshakePacket(t, stateStatus), b)
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"huge length prefix", []byte{0xff, 0xff, 0xff, 0xff, 0x07, 0x00}},
		{"length past handshake limit", frame(AppendVarInt(nil, 100000), []byte{0x00})},
		{"over-long varint", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"zero length", []byte{0x00}},
		{"first packet not handshake", []byte{0x01, 0x05}},
		{"handshake truncated", []byte{0x02, 0x00, 0x01}},
		{"handshake trailing bytes", handshakeWith(t, "localhost", 0x01, 0x02)},
		{"address too long", handshakeWith(t, strings.Repeat("a", 256))},
		{"unknown next state", handshakePacket(t, 9)},
		{"status request with data", statusThen(0x02, 0x00, 0x01)},
		{"two status requests", statusThen(0x01, 0x00, 0x01, 0x00)},
		{"short ping", statusThen(0x05, 0x01, 1, 2, 3, 4)},
		{"unknown status packet", statusThen(0x01, 0x07)},
		{"http request", []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\nConnection: close\r\n\r\n")},
		{"tls client hello", []byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(t, addr)
			if _, err := conn.Write(tt.in); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, conn)
		})
	}
}

func TestServeClosedOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	s := &Server{Status: func() StatusResponse { return testStatus }, Timeout: time.Hour}
	go func() { done <- s.Serve(ctx, ln) }()

	// Take a status and then stall: the connection is now held by a
	// handler that would wait an hour.
	conn := dial(t, ln.Addr().String())
	if _, err := conn.Write(frame(handshakePacket(t, stateStatus), []byte{0x01, idStatusRequest})); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPacket(bufio.NewReader(conn), MaxPacketLen); err != nil {
		t.Fatalf("read status response: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve() = %v, want nil after cancel", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("Serve() did not return %v after cancel", waitLimit)
	}
	expectClosed(t, conn)
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Errorf("Dial(%s) after Serve returned succeeded, want the listener closed", ln.Addr())
	}
}

func TestServeNilStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := new(Server).Serve(t.Context(), ln); err == nil {
		t.Errorf("Serve() with nil Status = nil, want an error")
	}
}

// Slow peers are cut off by the connection deadline, whether they stall or
// drip a byte at a time. net.Pipe in a synctest bubble runs the real
// 10-second deadline on a fake clock.
func TestServeSlowloris(t *testing.T) {
	tests := []struct {
		name string
		peer func(conn net.Conn)
	}{
		{"stall after one byte", func(conn net.Conn) {
			_, _ = conn.Write([]byte{0x10})
		}},
		{"stall in status state", func(conn net.Conn) {
			_, _ = conn.Write(handshakePacket(t, stateStatus))
		}},
		{"drip one byte a second", func(conn net.Conn) {
			// A 255-byte handshake announced, then one byte of it at a
			// time, forever.
			_, _ = conn.Write([]byte{0xff, 0x01, 0x00})
			for {
				time.Sleep(time.Second)
				if _, err := conn.Write([]byte{0x01}); err != nil {
					return
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, server := net.Pipe()
				defer client.Close()
				s := &Server{Status: func() StatusResponse { return testStatus }}
				start := time.Now()
				handled := make(chan struct{})
				go func() {
					s.handle(context.Background(), server)
					close(handled)
				}()
				peerDone := make(chan struct{})
				go func() {
					tt.peer(client)
					close(peerDone)
				}()
				<-handled
				if got := time.Since(start); got != DefaultTimeout {
					t.Errorf("connection closed after %v, want %v", got, DefaultTimeout)
				}
				client.Close()
				<-peerDone
			})
		})
	}
}
