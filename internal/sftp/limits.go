package sftp

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// limitsConn sits between an SFTP channel and pkg/sftp's request server,
// which lacks OpenSSH's limits@openssh.com extension: it adds the
// extension to the server's VERSION packet and answers the client's
// limits request itself. Without it OpenSSH's client reads and writes
// 32 KiB per request (against 255 KiB from OpenSSH's own server), and
// measured downloads and uploads at about half of OpenSSH's speed
// (docs/benchmarks.md, SFTP section). It also sends every outgoing
// packet in one channel write (pkg/sftp writes a header and a payload
// separately, two SSH messages per packet).
//
// It reads packet framing only (length, type, and an extended request's
// name); every other byte passes through unchanged.
//
// It also bounds the requests pkg/sftp holds at once (handed on, not yet
// answered) to maxInFlight: pkg/sftp's request server runs with its
// allocator (WithRSAllocator), which reuses 256 KiB pages for packets and
// read buffers instead of allocating one per request, and keeps every
// page it ever used until the session ends. Bounding what is in flight
// bounds those pages (about two per request) whatever a client pipelines:
// OpenSSH's client keeps 64 requests outstanding.
type limitsConn struct {
	ch     io.ReadWriteCloser
	limits limitsReply

	// Read side (pkg/sftp's single reader goroutine).
	hdr     [5]byte
	pending []byte // bytes of the current packet read ahead, to hand on
	fwd     int    // bytes of the current packet still to pass through

	// Write side: pkg/sftp writes under its own lock; replies to limits
	// requests are written between its packets. mu also guards inFlight
	// (the reader waits on more for it to drop) and err.
	mu          sync.Mutex
	more        sync.Cond
	inFlight    int    // requests handed to pkg/sftp, not yet answered
	maxInFlight int    // at most this many
	err         error  // the channel failed or was closed: no more requests
	out         []byte // the outgoing packet being assembled
	need        int    // its length with the 4-byte prefix; 0: not known yet
	version     bool   // the VERSION packet went out
	queued      [][]byte
}

// limitsReply is the answer to limits@openssh.com.
type limitsReply struct {
	maxPacket, maxRead, maxWrite, maxHandles uint64
}

const (
	fxpVersion       = 2
	fxpExtended      = 200
	fxpExtendedReply = 201
	limitsExt        = "limits@openssh.com"
	// maxIncoming is pkg/sftp's largest accepted packet (its
	// maxMsgLength): the length field of a packet, without itself.
	maxIncoming = 256 << 10
)

// outBufs are the buffers packets are assembled in: one per packet in
// flight, not one per session (an idle session holds none).
var outBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxIncoming+64); return &b }}

func newLimitsConn(ch io.ReadWriteCloser, maxTx uint32, maxHandles, maxInFlight int) *limitsConn {
	c := &limitsConn{ch: ch, maxInFlight: max(1, maxInFlight), limits: limitsReply{
		maxPacket: maxIncoming, maxRead: uint64(maxTx), maxWrite: uint64(maxTx), maxHandles: uint64(maxHandles),
	}}
	c.more.L = &c.mu
	return c
}

// admit waits until pkg/sftp holds fewer than maxInFlight requests and
// counts one more; an error once the channel failed or was closed.
func (c *limitsConn) admit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inFlight >= c.maxInFlight && c.err == nil {
		c.more.Wait()
	}
	if c.err != nil {
		return c.err
	}
	c.inFlight++
	return nil
}

// fail records that no more requests will be answered and wakes the
// reader; c.mu is held.
func (c *limitsConn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.more.Broadcast()
}

func (c *limitsConn) Read(p []byte) (int, error) {
	for {
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		if c.fwd > 0 {
			n, err := c.ch.Read(p[:min(len(p), c.fwd)])
			c.fwd -= n
			return n, err
		}
		// A packet starts: its length and type.
		if _, err := io.ReadFull(c.ch, c.hdr[:]); err != nil {
			return 0, err
		}
		length := int(binary.BigEndian.Uint32(c.hdr[:4]))
		if length < 1 {
			return 0, errors.New("sftp: empty packet")
		}
		if c.hdr[4] != fxpExtended || length > maxIncoming {
			if err := c.admit(); err != nil {
				return 0, err
			}
			c.pending, c.fwd = c.hdr[:], length-1
			continue
		}
		body := make([]byte, length-1)
		if _, err := io.ReadFull(c.ch, body); err != nil {
			return 0, err
		}
		if id, ok := limitsRequest(body); ok {
			if err := c.reply(id); err != nil {
				return 0, err
			}
			continue
		}
		if err := c.admit(); err != nil {
			return 0, err
		}
		c.pending = append(c.hdr[:5:5], body...)
	}
}

// limitsRequest reports whether an extended request's body (after the
// type) is limits@openssh.com, and its id.
func limitsRequest(body []byte) (uint32, bool) {
	if len(body) < 8 {
		return 0, false
	}
	id := binary.BigEndian.Uint32(body)
	n := binary.BigEndian.Uint32(body[4:])
	if uint64(n) > uint64(len(body)-8) || string(body[8:8+n]) != limitsExt {
		return 0, false
	}
	return id, true
}

// reply sends the limits, between two of pkg/sftp's packets.
func (c *limitsConn) reply(id uint32) error {
	b := make([]byte, 0, 4+1+4+32)
	b = binary.BigEndian.AppendUint32(b, 1+4+32)
	b = append(b, fxpExtendedReply)
	b = binary.BigEndian.AppendUint32(b, id)
	for _, v := range []uint64{c.limits.maxPacket, c.limits.maxRead, c.limits.maxWrite, c.limits.maxHandles} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.need != 0 || len(c.out) > 0 {
		c.queued = append(c.queued, b)
		return nil
	}
	_, err := c.ch.Write(b)
	return err
}

// Write assembles pkg/sftp's writes into whole packets and sends each in
// one write; the VERSION packet gets the extension added.
func (c *limitsConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	written := len(p)
	for len(p) > 0 {
		if c.out == nil {
			c.out = (*outBufs.Get().(*[]byte))[:0]
		}
		if c.need == 0 {
			take := min(len(p), 4-len(c.out))
			if take > 0 {
				c.out = append(c.out, p[:take]...)
				p = p[take:]
			}
			if len(c.out) < 4 {
				break
			}
			c.need = 4 + int(binary.BigEndian.Uint32(c.out))
		}
		take := min(len(p), c.need-len(c.out))
		c.out = append(c.out, p[:take]...)
		p = p[take:]
		if len(c.out) < c.need {
			break
		}
		if err := c.flush(); err != nil {
			return 0, err
		}
	}
	return written, nil
}

// flush sends the assembled packet, then any queued replies.
func (c *limitsConn) flush() error {
	pkt := c.out
	if !c.version && len(pkt) >= 5 && pkt[4] == fxpVersion {
		c.version = true
		pkt = binary.BigEndian.AppendUint32(pkt, uint32(len(limitsExt)))
		pkt = append(pkt, limitsExt...)
		pkt = binary.BigEndian.AppendUint32(pkt, 1)
		pkt = append(pkt, '1')
		binary.BigEndian.PutUint32(pkt, uint32(len(pkt)-4))
	}
	_, err := c.ch.Write(pkt)
	buf := pkt[:0]
	outBufs.Put(&buf)
	c.out, c.need = nil, 0
	if err != nil {
		c.fail(err)
		return err
	}
	// Every packet pkg/sftp sends answers one request (VERSION answers
	// INIT).
	if c.inFlight > 0 {
		c.inFlight--
		c.more.Signal()
	}
	for _, q := range c.queued {
		if _, err := c.ch.Write(q); err != nil {
			c.fail(err)
			return err
		}
	}
	c.queued = nil
	return nil
}

func (c *limitsConn) Close() error {
	c.mu.Lock()
	c.fail(io.ErrClosedPipe)
	c.mu.Unlock()
	return c.ch.Close()
}
