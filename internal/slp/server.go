package slp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// Packet IDs and handshake states of the exchange.
const (
	idHandshake       = 0x00
	idStatusRequest   = 0x00
	idStatusResponse  = 0x00
	idPing            = 0x01
	idPong            = 0x01
	idLoginStart      = 0x00
	idLoginDisconnect = 0x00

	stateStatus   = 1
	stateLogin    = 2
	stateTransfer = 3 // since 1.20.5; continues as login

	// legacyPing is the first byte of a pre-1.7 ping. As a VarInt length
	// it would announce a handshake of at least 254 bytes; vanilla reads
	// it as a legacy ping too.
	legacyPing = 0xFE
)

// Limits of the server side.
const (
	// DefaultTimeout bounds a whole connection when Server.Timeout is zero.
	// A real client finishes in milliseconds.
	DefaultTimeout = 10 * time.Second

	// serverMaxPacket caps every packet a client sends: the largest
	// legitimate one is a Handshake with a 255-character address (781
	// bytes).
	serverMaxPacket = 1024
	// pingPacketLen is a Ping or Pong: its ID and an i64.
	pingPacketLen = 16
	// maxConns is how many connections are served at once; more are
	// closed on accept so a flood cannot exhaust file descriptors.
	maxConns = 512
	// lingerTimeout is how long a connection is drained after the last
	// reply before it is closed; see drainClose.
	lingerTimeout = time.Second
	// maxAddressChars is the Handshake address limit.
	maxAddressChars = 255
	// maxNameChars is the Login Start player name limit.
	maxNameChars = 16
)

// LoginDisconnectReason is the text a login attempt is refused with.
const LoginDisconnectReason = "This is a Kiln test server"

// StatusResponse is what Serve answers a status request with.
type StatusResponse struct {
	Version Version
	Players Players
	// Description is the MOTD, sent as a text component. § codes in it
	// are rendered by the client, as in server.properties.
	Description string
	// Favicon is a data:image/png;base64 URL of a 64×64 PNG, or empty.
	Favicon string
}

// MarshalJSON encodes r as a Status Response JSON.
func (r StatusResponse) MarshalJSON() ([]byte, error) {
	type text struct {
		Text string `json:"text"`
	}
	return json.Marshal(struct {
		Version     Version `json:"version"`
		Players     Players `json:"players"`
		Description text    `json:"description"`
		Favicon     string  `json:"favicon,omitempty"`
	}{r.Version, r.Players, text{r.Description}, r.Favicon})
}

// Server answers Server List Ping (and the pre-1.7 legacy ping) on a
// listener. Set the fields before calling Serve and do not change them
// afterwards.
type Server struct {
	// Status returns the answer to a status request; it must be set. It
	// is called from many goroutines at once, once per request.
	Status func() StatusResponse
	// Timeout bounds each connection from accept to close, however the
	// peer drips its bytes; zero means DefaultTimeout.
	Timeout time.Duration
	// Log receives a debug record for each connection dropped on an
	// error; nil discards them.
	Log *slog.Logger
}

// Serve answers pings on ln with status until ctx is cancelled, using
// DefaultTimeout. See Server.Serve.
func Serve(ctx context.Context, ln net.Listener, status func() StatusResponse) error {
	s := &Server{Status: status}
	return s.Serve(ctx, ln)
}

// Serve accepts connections on ln and answers each on its own goroutine:
// Handshake then Status Request, Status Response, Ping, Pong; a legacy
// 0xFE ping with its 0xFF reply; a login attempt with Login Disconnect
// (LoginDisconnectReason). Anything else, or a connection still open after
// Timeout, is closed.
//
// Serve owns ln: it closes it when ctx is cancelled, closes the open
// connections, waits for their goroutines and returns nil. If ln fails
// otherwise (closed by someone else), Serve still waits, then returns the
// error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // closes the connections on an early return
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	if s.Status == nil {
		return errors.New("serve: Server.Status is nil")
	}

	sem := make(chan struct{}, maxConns)
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			// Out of file descriptors and the like: retry, slower each
			// time, like net/http.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logDebug("slp accept failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		backoff = 0
		select {
		case sem <- struct{}{}:
		default:
			s.logDebug("slp connection refused: too many connections", "remote", conn.RemoteAddr().String())
			_ = conn.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.handle(ctx, conn)
		})
	}
}

// handle serves one connection and closes it.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// One deadline for the whole connection rather than one per read: a
	// peer dripping a byte at a time cannot keep it open.
	deadline := time.Now().Add(timeout)
	if err := conn.SetDeadline(deadline); err != nil {
		return
	}
	if err := s.exchange(conn, deadline); err != nil && ctx.Err() == nil {
		s.logDebug("slp connection dropped", "remote", conn.RemoteAddr().String(), "err", err)
	}
}

func (s *Server) logDebug(msg string, args ...any) {
	if s.Log != nil {
		s.Log.Debug(msg, args...)
	}
}

// exchange runs the server side of one connection up to its last reply.
func (s *Server) exchange(conn net.Conn, deadline time.Time) error {
	br := bufio.NewReaderSize(conn, serverMaxPacket)
	first, err := br.Peek(1)
	if err != nil {
		return fmt.Errorf("read first byte: %w", err)
	}
	if first[0] == legacyPing {
		return s.legacy(conn, br, deadline)
	}

	p, err := ReadPacket(br, serverMaxPacket)
	if err != nil {
		return fmt.Errorf("read handshake: %w", err)
	}
	if p.ID != idHandshake {
		return fmt.Errorf("%w: first packet has id %#x, want handshake", ErrMalformed, p.ID)
	}
	hs, err := parseHandshake(p.Data)
	if err != nil {
		return err
	}
	switch hs.nextState {
	case stateStatus:
		return s.status(conn, br)
	case stateLogin, stateTransfer:
		return s.login(conn, br, deadline)
	}
	return fmt.Errorf("%w: handshake next state %d", ErrMalformed, hs.nextState)
}

// status answers Status Request and Ping in the status state. Like vanilla
// it allows one Status Request, a Ping without one, and closes after Pong.
func (s *Server) status(conn net.Conn, br *bufio.Reader) error {
	answered := false
	for {
		p, err := ReadPacket(br, serverMaxPacket)
		if err != nil {
			if answered && errors.Is(err, io.EOF) {
				return nil // the client took the status and left
			}
			return fmt.Errorf("read status packet: %w", err)
		}
		switch {
		case p.ID == idStatusRequest && len(p.Data) == 0 && !answered:
			js, err := json.Marshal(s.Status())
			if err != nil {
				return fmt.Errorf("encode status: %w", err)
			}
			if n := utf16Len(string(js)); n > MaxStatusLen {
				return fmt.Errorf("status response is %d characters, limit %d", n, MaxStatusLen)
			}
			if err := WritePacket(conn, Packet{ID: idStatusResponse, Data: AppendString(nil, string(js))}); err != nil {
				return fmt.Errorf("send status response: %w", err)
			}
			answered = true
		case p.ID == idPing && len(p.Data) == 8:
			if err := WritePacket(conn, Packet{ID: idPong, Data: p.Data}); err != nil {
				return fmt.Errorf("send pong: %w", err)
			}
			return nil
		default:
			return fmt.Errorf("%w: unexpected status packet id %#x with %d bytes", ErrMalformed, p.ID, len(p.Data))
		}
	}
}

// login reads Login Start and refuses the player with Login Disconnect.
func (s *Server) login(conn net.Conn, br *bufio.Reader, deadline time.Time) error {
	p, err := ReadPacket(br, serverMaxPacket)
	if err != nil {
		return fmt.Errorf("read login start: %w", err)
	}
	if p.ID != idLoginStart {
		return fmt.Errorf("%w: login packet id %#x, want login start", ErrMalformed, p.ID)
	}
	if _, err := ReadString(bytes.NewReader(p.Data), maxNameChars); err != nil {
		return fmt.Errorf("login start: %w", malformedEOF("player name", err))
	}
	reason, err := json.Marshal(struct {
		Text string `json:"text"`
	}{LoginDisconnectReason})
	if err != nil {
		return fmt.Errorf("encode disconnect reason: %w", err)
	}
	if err := WritePacket(conn, Packet{ID: idLoginDisconnect, Data: AppendString(nil, string(reason))}); err != nil {
		return fmt.Errorf("send login disconnect: %w", err)
	}
	drainClose(conn, deadline)
	return nil
}

// legacy answers a pre-1.7 ping (0xFE, 0xFE 0x01, or 0xFE 0x01 0xFA and a
// plugin message from 1.6) with the 1.4+ kick format, which every legacy
// client reads.
func (s *Server) legacy(conn net.Conn, br *bufio.Reader, deadline time.Time) error {
	// What the client sent with 0xFE needs no parsing.
	_, _ = br.Discard(br.Buffered())
	if _, err := conn.Write(legacyReply(s.Status())); err != nil {
		return fmt.Errorf("send legacy reply: %w", err)
	}
	drainClose(conn, deadline)
	return nil
}

// legacyReply is 0xFF, a UTF-16 length and UTF-16BE
// "§1\0protocol\0version\0motd\0online\0max". The protocol is 127, as
// vanilla sends: newer than any legacy client, so it shows the version
// name as incompatible.
func legacyReply(st StatusResponse) []byte {
	clean := func(s string) string { return strings.ReplaceAll(s, "\x00", "") }
	msg := strings.Join([]string{
		"§1",
		"127",
		clean(st.Version.Name),
		clean(st.Description),
		strconv.Itoa(st.Players.Online),
		strconv.Itoa(st.Players.Max),
	}, "\x00")
	units := utf16.Encode([]rune(msg))
	units = units[:min(len(units), 0xFFFF)]
	b := make([]byte, 0, 3+2*len(units))
	b = append(b, 0xFF)
	b = binary.BigEndian.AppendUint16(b, uint16(len(units)))
	for _, u := range units {
		b = binary.BigEndian.AppendUint16(b, u)
	}
	return b
}

// drainClose half-closes conn and reads whatever the peer still sends
// until it closes, or lingerTimeout. Closing a socket with unread input
// resets the connection, and a reset can destroy the reply just sent
// before the peer reads it; legacy clients and login attempts may send
// more than we read.
func drainClose(conn net.Conn, deadline time.Time) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(minTime(deadline, time.Now().Add(lingerTimeout)))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, serverMaxPacket))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type handshake struct {
	protocol  int32
	address   string
	port      uint16
	nextState int32
}

// parseHandshake decodes a Handshake's data; trailing bytes are an error.
func parseHandshake(data []byte) (handshake, error) {
	r := bytes.NewReader(data)
	var hs handshake
	var err error
	if hs.protocol, err = ReadVarInt(r); err != nil {
		return hs, fmt.Errorf("handshake: %w", malformedEOF("protocol", err))
	}
	if hs.address, err = ReadString(r, maxAddressChars); err != nil {
		return hs, fmt.Errorf("handshake: %w", malformedEOF("address", err))
	}
	var port [2]byte
	if _, err := io.ReadFull(r, port[:]); err != nil {
		return hs, fmt.Errorf("handshake: %w", malformedEOF("port", err))
	}
	hs.port = binary.BigEndian.Uint16(port[:])
	if hs.nextState, err = ReadVarInt(r); err != nil {
		return hs, fmt.Errorf("handshake: %w", malformedEOF("next state", err))
	}
	if r.Len() != 0 {
		return hs, fmt.Errorf("%w: handshake has %d trailing bytes", ErrMalformed, r.Len())
	}
	return hs, nil
}
