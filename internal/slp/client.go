package slp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// handshakeProtocol is the protocol number Ping announces: 1.21.4's. Any
// number gets a status from vanilla; a real one rather than −1 keeps
// proxies that pick a backend or a version by protocol on their normal
// path.
const handshakeProtocol = 769

// Status is what a server answered to Ping.
type Status struct {
	Version Version
	Players Players
	// Description is the MOTD as plain text: the chat component's text and
	// extra parts concatenated, § formatting codes removed.
	Description string
	// Latency is the time from sending Ping to receiving Pong.
	Latency time.Duration
	// Raw is the Status Response JSON exactly as received.
	Raw json.RawMessage
}

// Version is the server's version name and protocol number.
type Version struct {
	Name     string `json:"name"`
	Protocol int    `json:"protocol"`
}

// Players is the player count and limit.
type Players struct {
	Max    int `json:"max"`
	Online int `json:"online"`
}

// Ping asks the server at addr (host:port; SRV records are not resolved)
// for its status: Handshake (next state status), Status Request, Status
// Response, then Ping with a random number that the Pong must echo.
//
// It waits as long as ctx allows, so give ctx a deadline. Errors wrap
// ErrMalformed when the peer broke the protocol (not a Minecraft server,
// a wrong Pong), ctx.Err() when ctx ended first, and otherwise the network
// error.
func Ping(ctx context.Context, addr string) (Status, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return Status{}, fmt.Errorf("ping %s: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return Status{}, fmt.Errorf("ping %s: port %q: %w", addr, portStr, err)
	}

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Status{}, fmt.Errorf("ping %s: %w", addr, err)
	}
	defer conn.Close()
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		if err := conn.SetDeadline(deadline); err != nil {
			return Status{}, fmt.Errorf("ping %s: %w", addr, err)
		}
	}
	// A deadline in the past wakes any read or write blocked when ctx is
	// cancelled.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	st, err := exchange(conn, host, uint16(port))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Name the cause the caller can test: the connection deadline
			// is ctx's deadline or cancellation. The ctx timer may not have
			// fired yet when the connection's did.
			if cerr := ctx.Err(); cerr != nil {
				return Status{}, fmt.Errorf("ping %s: %w: %w", addr, cerr, err)
			}
			if hasDeadline && !time.Now().Before(deadline) {
				return Status{}, fmt.Errorf("ping %s: %w: %w", addr, context.DeadlineExceeded, err)
			}
		}
		return Status{}, fmt.Errorf("ping %s: %w", addr, err)
	}
	return st, nil
}

// exchange runs the status exchange on an open connection.
func exchange(conn net.Conn, host string, port uint16) (Status, error) {
	hs := AppendVarInt(nil, handshakeProtocol)
	hs = AppendString(hs, host)
	hs = binary.BigEndian.AppendUint16(hs, port)
	hs = AppendVarInt(hs, stateStatus)
	out, err := appendPacket(nil, Packet{ID: idHandshake, Data: hs})
	if err != nil {
		return Status{}, fmt.Errorf("handshake: %w", err)
	}
	out, _ = appendPacket(out, Packet{ID: idStatusRequest})
	if _, err := conn.Write(out); err != nil {
		return Status{}, fmt.Errorf("send handshake: %w", err)
	}

	br := bufio.NewReader(conn)
	p, err := ReadPacket(br, MaxPacketLen)
	if err != nil {
		return Status{}, fmt.Errorf("read status response: %w", err)
	}
	if p.ID != idStatusResponse {
		return Status{}, fmt.Errorf("%w: status response has packet id %#x, want %#x", ErrMalformed, p.ID, idStatusResponse)
	}
	js, err := ReadString(bytes.NewReader(p.Data), MaxStatusLen)
	if err != nil {
		return Status{}, fmt.Errorf("read status response: %w", malformedEOF("status json", err))
	}
	st, err := parseStatus([]byte(js))
	if err != nil {
		return Status{}, err
	}

	token := rand.Int64()
	start := time.Now()
	if err := WritePacket(conn, Packet{ID: idPing, Data: binary.BigEndian.AppendUint64(nil, uint64(token))}); err != nil {
		return Status{}, fmt.Errorf("send ping: %w", err)
	}
	p, err = ReadPacket(br, pingPacketLen)
	if err != nil {
		return Status{}, fmt.Errorf("read pong: %w", err)
	}
	st.Latency = time.Since(start)
	if p.ID != idPong || len(p.Data) != 8 {
		return Status{}, fmt.Errorf("%w: pong has packet id %#x and %d bytes, want %#x and 8", ErrMalformed, p.ID, len(p.Data), idPong)
	}
	if got := int64(binary.BigEndian.Uint64(p.Data)); got != token {
		return Status{}, fmt.Errorf("%w: pong %d, want %d", ErrMalformed, got, token)
	}
	return st, nil
}

// parseStatus decodes a Status Response JSON.
func parseStatus(js []byte) (Status, error) {
	var wire struct {
		Version     Version         `json:"version"`
		Players     Players         `json:"players"`
		Description json.RawMessage `json:"description"`
	}
	if err := json.Unmarshal(js, &wire); err != nil {
		return Status{}, fmt.Errorf("%w: status json: %w", ErrMalformed, err)
	}
	st := Status{Version: wire.Version, Players: wire.Players, Raw: json.RawMessage(js)}
	if len(wire.Description) > 0 {
		var v any
		if err := json.Unmarshal(wire.Description, &v); err != nil {
			return Status{}, fmt.Errorf("%w: status description: %w", ErrMalformed, err)
		}
		var b strings.Builder
		chatText(&b, v)
		st.Description = stripFormatting(b.String())
	}
	return st, nil
}

// chatText appends the plain text of a chat component: a string, an
// object whose text is followed by its extra components, or an array
// whose elements follow each other. Other keys (translate, score,
// keybind…) carry no plain text a MOTD uses; they are skipped.
func chatText(b *strings.Builder, v any) {
	switch v := v.(type) {
	case string:
		b.WriteString(v)
	case float64, bool:
		// Vanilla turns a primitive component into its text.
		fmt.Fprint(b, v)
	case []any:
		for _, e := range v {
			chatText(b, e)
		}
	case map[string]any:
		if t, ok := v["text"]; ok {
			chatText(b, t)
		}
		if extra, ok := v["extra"].([]any); ok {
			for _, e := range extra {
				chatText(b, e)
			}
		}
	}
}

// stripFormatting removes legacy § formatting codes (§ and the character
// after it), which servers still put in MOTD text.
func stripFormatting(s string) string {
	if !strings.Contains(s, "§") {
		return s
	}
	var b strings.Builder
	skip := false
	for _, r := range s {
		switch {
		case skip:
			skip = false
		case r == '§':
			skip = true
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
