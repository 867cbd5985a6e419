package slp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

func TestParseStatusDescription(t *testing.T) {
	tests := []struct {
		name string
		desc string
		want string
	}{
		{"string", `"A Minecraft Server"`, "A Minecraft Server"},
		{"text object", `{"text":"Hello"}`, "Hello"},
		{"extra", `{"text":"","extra":[{"text":"Kiln ","color":"gold"},{"text":"test","bold":true}]}`, "Kiln test"},
		{"nested extra", `{"text":"a","extra":[{"text":"b","extra":["c",{"text":"d"}]},"e"]}`, "abcde"},
		{"array", `[{"text":"one "},"two"]`, "one two"},
		{"formatting codes", `{"text":"§aGreen §lbold§r plain"}`, "Green bold plain"},
		{"trailing section sign", `"end§"`, "end"},
		{"translate only", `{"translate":"multiplayer.status.unknown"}`, ""},
		{"primitive", `{"text":"players: ","extra":[5]}`, "players: 5"},
		{"missing", ``, ""},
		{"null", `null`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := `{"version":{"name":"x","protocol":1},"players":{"max":1,"online":0}`
			if tt.desc != "" {
				js += `,"description":` + tt.desc
			}
			js += `}`
			st, err := parseStatus([]byte(js))
			if err != nil {
				t.Fatalf("parseStatus(%s) = %v", js, err)
			}
			if st.Description != tt.want {
				t.Errorf("parseStatus(%s).Description = %q, want %q", js, st.Description, tt.want)
			}
		})
	}
}

func TestParseStatusMalformed(t *testing.T) {
	for _, js := range []string{``, `{`, `[]`, `{"players":{"max":"lots"}}`, `{"version":{"protocol":1.5}}`} {
		if _, err := parseStatus([]byte(js)); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseStatus(%q) = %v, want %v", js, err, ErrMalformed)
		}
	}
}

// listen accepts on 127.0.0.1 and hands each connection to serve on its
// own goroutine, until the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				serve(conn)
			})
		}
	})
	return ln.Addr().String()
}

func TestPingContext(t *testing.T) {
	release := make(chan struct{})
	accepted := make(chan struct{}, 2)
	// A server that accepts and never answers.
	addr := listen(t, func(conn net.Conn) {
		accepted <- struct{}{}
		<-release
	})
	defer close(release)

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if _, err := Ping(ctx, addr); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Ping(%s) with a deadline against a silent server = %v, want %v", addr, err, context.DeadlineExceeded)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := Ping(ctx, addr); !errors.Is(err, context.Canceled) {
			t.Errorf("Ping(%s) with a cancelled ctx = %v, want %v", addr, err, context.Canceled)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := Ping(ctx, addr)
			errc <- err
		}()
		<-accepted
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Ping(%s) cancelled against a silent server = %v, want %v", addr, err, context.Canceled)
		}
	})
}

func TestPingMalformed(t *testing.T) {
	status := func(conn net.Conn) *bufio.Reader {
		br := bufio.NewReader(conn)
		for range 2 { // handshake, status request
			if _, err := ReadPacket(br, serverMaxPacket); err != nil {
				return nil
			}
		}
		js := `{"version":{"name":"x","protocol":769},"players":{"max":1,"online":0},"description":"hi"}`
		if WritePacket(conn, Packet{ID: idStatusResponse, Data: AppendString(nil, js)}) != nil {
			return nil
		}
		return br
	}
	tests := []struct {
		name  string
		serve func(net.Conn)
	}{
		{"http server", func(conn net.Conn) {
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n400 Bad Request"))
		}},
		{"status response wrong id", func(conn net.Conn) {
			_ = WritePacket(conn, Packet{ID: 0x05, Data: AppendString(nil, "{}")})
		}},
		{"status not json", func(conn net.Conn) {
			_ = WritePacket(conn, Packet{ID: idStatusResponse, Data: AppendString(nil, "hello")})
		}},
		{"status string too long", func(conn net.Conn) {
			_ = WritePacket(conn, Packet{ID: idStatusResponse, Data: AppendVarInt(nil, 3*MaxStatusLen+1)})
		}},
		{"wrong pong", func(conn net.Conn) {
			br := status(conn)
			if br == nil {
				return
			}
			p, err := ReadPacket(br, serverMaxPacket)
			if err != nil || len(p.Data) != 8 {
				return
			}
			token := binary.BigEndian.Uint64(p.Data)
			_ = WritePacket(conn, Packet{ID: idPong, Data: binary.BigEndian.AppendUint64(nil, token^1)})
		}},
		{"pong wrong id", func(conn net.Conn) {
			br := status(conn)
			if br == nil {
				return
			}
			p, err := ReadPacket(br, serverMaxPacket)
			if err != nil {
				return
			}
			_ = WritePacket(conn, Packet{ID: 0x02, Data: p.Data})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := listen(t, tt.serve)
			ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
			defer cancel()
			if _, err := Ping(ctx, addr); !errors.Is(err, ErrMalformed) {
				t.Errorf("Ping(%s) = %v, want %v", addr, err, ErrMalformed)
			}
		})
	}
}

func TestPingBadAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:port", "127.0.0.1:70000"} {
		if _, err := Ping(t.Context(), addr); err == nil {
			t.Errorf("Ping(%q) = nil error, want an address error", addr)
		}
	}
}
