package blob

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"time"
)

// Deadlines of the S3 backend's requests (Options.Idle, .Header): a
// store that accepts a connection and then says nothing, or stops in the
// middle of an answer, fails the request in bounded time instead of
// holding a snapshot "creating" forever (minio-go's default transport has
// a dial and a header timeout but nothing once a body flows).
const (
	defaultDial   = 10 * time.Second
	defaultIdle   = 60 * time.Second // no byte read or written for this long
	defaultHeader = 60 * time.Second // from the request sent to the answer's headers
)

// s3Transport is the S3 backend's transport when Options.Transport is
// nil: minio-go's settings, plus a deadline on every read and write of
// the connection (idle: progress resets it) and a header timeout.
func s3Transport(idle, header time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: defaultDial, KeepAlive: 15 * time.Second}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: idle}, nil
		},
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   16,
		ResponseHeaderTimeout: header,
		IdleConnTimeout:       time.Minute,
		TLSHandshakeTimeout:   defaultDial,
		ExpectContinueTimeout: 10 * time.Second,
		DisableCompression:    true, // minio-go's choice: bodies are what they are
	}
}

// idleConn fails a read or a write that makes no progress for idle.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	return n, deadlineErr(err)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	return n, deadlineErr(err)
}

// errStalled: the store sent or took no byte within the idle deadline.
var errStalled = errors.New("the object store stopped answering (no byte moved within the idle deadline)")

func deadlineErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.Join(errStalled, context.DeadlineExceeded)
	}
	return err
}
