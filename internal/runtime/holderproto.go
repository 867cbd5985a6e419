package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The holder protocol, version 1 (doc.go, "Holders"). It is spoken over
// the unix socket holderSocket in a server's state directory, one request
// per connection, in JSON lines:
//
//	holder → kiln  holderHello
//	kiln → holder  holderRequest
//	holder → kiln  holderReply, then for "attach" holderEvents
//
// Version 1 is frozen: a later kiln must speak it to the holders an
// earlier one left running (an upgrade re-attaches). Fields may be added
// (readers ignore what they do not know); none is removed or changes
// meaning, and an op a holder does not know is answered with an error.
// A change that cannot keep to that is version 2, and kiln goes on
// speaking 1 to holders that greet with 1.
const holderProtocol = 1

const (
	// holderSocket is the holder's socket in its state directory.
	holderSocket = "holder.sock"
	// holderLog is the holder's log in its state directory (its stderr).
	holderLog = "holder.log"
	// heldRefPrefix starts the Ref of a held instance:
	// "holder:<game pid>:<game start time>".
	heldRefPrefix = "holder:"
	// holderRing is how many console lines a holder keeps.
	holderRing = 1000
	// holderIOTimeout bounds one exchange with a holder (a request and its
	// reply, a console write into the game's stdin, an event to kiln).
	holderIOTimeout = 10 * time.Second
)

// Ops of the protocol.
const (
	opStatus  = "status"  // the game: holderStatus
	opAttach  = "attach"  // the console from line From on, then the exit
	opWrite   = "write"   // Line to the game's stdin
	opSignal  = "signal"  // Signal ("TERM" or "KILL") to the game's process group
	opRelease = "release" // the exit is collected: the holder may end
)

// holderHello is the first line a holder sends on every connection.
type holderHello struct {
	Shim     string `json:"shim"`     // always "kiln"
	Protocol int    `json:"protocol"` // the holder's protocol version
	Version  string `json:"version"`  // the kiln version the holder runs
	PID      int    `json:"pid"`      // the holder's own pid
}

// holderRequest is kiln's one request on a connection.
type holderRequest struct {
	Op     string `json:"op"`
	From   uint64 `json:"from,omitempty"`   // attach: first line wanted (0: the oldest kept)
	Line   string `json:"line,omitempty"`   // write
	Signal string `json:"signal,omitempty"` // signal
}

// holderReply answers a request.
type holderReply struct {
	Error  string        `json:"error,omitempty"`
	Status *holderStatus `json:"status,omitempty"` // status
	Next   uint64        `json:"next,omitempty"`   // attach: the number the next line printed will have
}

// holderStatus is what a holder says of its game.
type holderStatus struct {
	ServerID    string    `json:"server_id"`
	PID         int       `json:"pid"`   // the game's
	Start       uint64    `json:"start"` // its start time (field 22 of /proc/<pid>/stat)
	Cgroup      bool      `json:"cgroup"`
	StopCommand string    `json:"stop_command"`
	Exited      bool      `json:"exited"`
	Exit        *wireExit `json:"exit,omitempty"`
	Next        uint64    `json:"next"` // the number the next console line will have
}

// wireExit is Exit on the wire.
type wireExit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
}

func toWire(e Exit) *wireExit {
	w := &wireExit{Code: e.Code, Signal: e.Signal}
	if e.Err != nil {
		w.Error = e.Err.Error()
	}
	return w
}

func (w *wireExit) exit() Exit {
	if w == nil {
		return Exit{Code: -1, Err: errors.New("the holder reported no exit")}
	}
	e := Exit{Code: w.Code, Signal: w.Signal}
	if w.Error != "" {
		e.Err = errors.New(w.Error)
	}
	return e
}

// holderEvent is one event of an attached console: a line (Seq > 0, the
// line's number) or the game's exit (Exit set; the last event).
type holderEvent struct {
	Seq  uint64    `json:"seq,omitempty"`
	Line string    `json:"line,omitempty"`
	Exit *wireExit `json:"exit,omitempty"`
}

// holderLaunch is what kiln gives a holder it starts, on its stdin: never
// on disk, as the environment may hold credentials. Both ends are the
// same binary (kiln starts /proc/self/exe), so it needs no version.
type holderLaunch struct {
	ServerID    string        `json:"server_id"`
	Root        string        `json:"root"`
	Argv        []string      `json:"argv"`
	Env         []string      `json:"env"`
	User        *User         `json:"user,omitempty"`
	StopCommand string        `json:"stop_command"`
	Cgroup      *launchCgroup `json:"cgroup,omitempty"` // nil: none
	// Sandbox is the trampoline the game starts through (User set;
	// ProcessOptions.Sandbox, probed by kiln); nil: none.
	Sandbox []string `json:"sandbox,omitempty"`
}

// launchCgroup is the server's cgroup, made with its limits by kiln.
type launchCgroup struct {
	V2        bool     `json:"v2"`
	Kiln      []string `json:"kiln"`       // cgroupHost.kiln
	CloneInto bool     `json:"clone_into"` // try CLONE_INTO_CGROUP first
}

// holderStarted is the holder's one report on its stdout: the game runs,
// or why not.
type holderStarted struct {
	Error            string `json:"error,omitempty"`
	PID              int    `json:"pid,omitempty"`
	Start            uint64 `json:"start,omitempty"`
	Cgroup           bool   `json:"cgroup,omitempty"`
	CloneIntoRefused string `json:"clone_into_refused,omitempty"`
	Unlimited        string `json:"unlimited,omitempty"`
}

// ProtocolError: a holder greets with a protocol this kiln does not speak
// (a newer kiln started it).
type ProtocolError struct {
	Protocol int
	PID      int // the holder's
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("the holder speaks protocol %d; this kiln speaks %d", e.Protocol, holderProtocol)
}

// socketAddr is a name of dir's socket short enough for a socket address
// (108 bytes with its NUL): the path itself, else the path through a
// descriptor of dir (/proc/self/fd/N/holder.sock) until release.
func socketAddr(dir string) (addr string, release func(), err error) {
	path := filepath.Join(dir, holderSocket)
	if len(path) < 100 {
		return path, func() {}, nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + holderSocket, func() { unix.Close(fd) }, nil
}

// holderConn is one connection to a holder.
type holderConn struct {
	c     net.Conn
	dec   *json.Decoder
	enc   *json.Encoder
	hello holderHello
}

// dialHolder connects to the holder of dir and reads its greeting. Errors:
// ErrNoHolder, *ProtocolError.
func dialHolder(ctx context.Context, dir string) (*holderConn, error) {
	addr, release, err := socketAddr(dir)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, ErrNoHolder
		}
		return nil, fmt.Errorf("connect to the holder: %w", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	release()
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, ErrNoHolder
		}
		return nil, fmt.Errorf("connect to the holder: %w", err)
	}
	hc := &holderConn{c: c, dec: json.NewDecoder(c), enc: json.NewEncoder(c)}
	hc.enc.SetEscapeHTML(false)
	_ = c.SetDeadline(ioDeadline(ctx))
	if err := hc.dec.Decode(&hc.hello); err != nil {
		c.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			// Accepted as it was ending: it has let its socket go.
			return nil, ErrNoHolder
		}
		return nil, fmt.Errorf("read the holder's greeting: %w", err)
	}
	if hc.hello.Shim != "kiln" {
		c.Close()
		return nil, fmt.Errorf("the socket in %s is no kiln holder", dir)
	}
	if hc.hello.Protocol != holderProtocol {
		c.Close()
		return nil, &ProtocolError{Protocol: hc.hello.Protocol, PID: hc.hello.PID}
	}
	return hc, nil
}

// ioDeadline is the deadline of one exchange: holderIOTimeout, or ctx's
// when sooner.
func ioDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(holderIOTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// send sends req and reads the reply; a reply with an error is returned
// as one.
func (hc *holderConn) send(req holderRequest) (holderReply, error) {
	var r holderReply
	if err := hc.enc.Encode(req); err != nil {
		return r, fmt.Errorf("holder %s: %w", req.Op, err)
	}
	if err := hc.dec.Decode(&r); err != nil {
		return r, fmt.Errorf("holder %s: %w", req.Op, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("holder %s: %s", req.Op, r.Error)
	}
	return r, nil
}

func (hc *holderConn) Close() error { return hc.c.Close() }

// holderCall makes one request of the holder of dir on a connection of
// its own.
func holderCall(ctx context.Context, dir string, req holderRequest) (holderReply, error) {
	hc, err := dialHolder(ctx, dir)
	if err != nil {
		return holderReply{}, err
	}
	defer hc.Close()
	return hc.send(req)
}
