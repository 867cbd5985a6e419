package blob

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// hungStore is a loopback "S3 endpoint" that accepts connections and
// reads requests; then, per answer: "silent" never answers, "stall" sends
// the headers and a few bytes of a long body and stops. It stands in for
// a store that hangs, which versitygw does not do.
func hungStore(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if answer == "stall" {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nContent-Type: application/octet-stream\r\nLast-Modified: Mon, 02 Jan 2006 15:04:05 GMT\r\nETag: \"x\"\r\n\r\nsome bytes")
					}
					// …and nothing more, until the test ends.
				}
			})
		}
	})
	return "s3://bucket/prefix?endpoint=http://" + ln.Addr().String()
}

// TestHungStoreFails: a store that accepts and then says nothing, or
// stops in the middle of an answer, fails the request in bounded time
// (the idle and header deadlines, minio-go's retries) with a sentence a
// team may read. Before, nothing bounded a body that stopped flowing: a
// snapshot stayed "creating", holding its slot.
func TestHungStoreFails(t *testing.T) {
	for _, tc := range []struct {
		answer string
		op     func(context.Context, Store) error
	}{
		{"silent", func(ctx context.Context, s Store) error {
			_, err := s.Put(ctx, "k", strings.NewReader("data"), 4)
			return err
		}},
		{"silent", func(ctx context.Context, s Store) error { _, err := s.Stat(ctx, "k"); return err }},
		{"stall", func(ctx context.Context, s Store) error {
			rc, err := s.Get(ctx, "k")
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		}},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			s, err := Open(t.Context(), hungStore(t, tc.answer), Options{Idle: 300 * time.Millisecond, Header: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // only the test's own bound
			defer cancel()
			start := time.Now()
			err = tc.op(ctx, s)
			took := time.Since(start)
			if err == nil {
				t.Fatal("a request to a hung store succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("the request hung for a minute: %v", err)
			}
			be, ok := errors.AsType[*Error](err)
			if !ok || be.Public() == "" || strings.Contains(be.Public(), "127.0.0.1") {
				t.Errorf("error %v (%T): want a *blob.Error with a sentence naming no address", err, err)
			}
			t.Logf("failed after %s: %s", took.Round(time.Millisecond), be.Public())
		})
	}
}
