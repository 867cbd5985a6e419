package blob

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testChecked: a Put whose body is Checked with the CRC-32C of its bytes
// stores them; one whose checksum differs (the bytes changed between the
// caller and the store) fails with ErrChecksum and stores nothing —
// whether the body is written in one piece (a *bytes.Reader), copied
// (another reader) or of unknown size, and in a batch.
func testChecked(t *testing.T, s Store) {
	ctx := t.Context()
	readers := map[string]func([]byte) io.Reader{
		"bytes.Reader": func(b []byte) io.Reader { return bytes.NewReader(b) },
		"other reader": func(b []byte) io.Reader { return strings.NewReader(string(b)) },
	}
	for name, reader := range readers {
		for _, size := range []int{0, 1, 4097, 3 << 20} {
			data := bytes.Repeat([]byte(name[:1]), size)
			data = append(data, name[0], byte(size), byte(size>>8), byte(size>>16))
			key := chunkKey(data)
			for _, declared := range []int64{int64(len(data)), -1} {
				created, err := s.Put(ctx, key, Checked(reader(data), CRC32C(data)^1), declared)
				if !errors.Is(err, ErrChecksum) || created {
					t.Errorf("%s, %d bytes (declared %d), wrong checksum: Put = %v, %v, want ErrChecksum", name, len(data), declared, created, err)
				}
				wantMissing(t, s, key)
			}
			if created, err := s.Put(ctx, key, Checked(reader(data), CRC32C(data)), int64(len(data))); err != nil || !created {
				t.Fatalf("%s, %d bytes, right checksum: Put = %v, %v, want true, nil", name, len(data), created, err)
			}
			if got := get(t, s, key); !bytes.Equal(got, data) {
				t.Errorf("%s, %d bytes: stored %d bytes, not the ones put", name, len(data), len(got))
			}

			b := NewBatch(s)
			data = append(data, 'b')
			key = chunkKey(data)
			if created, err := b.Put(ctx, key, Checked(reader(data), CRC32C(data)+1), int64(len(data))); !errors.Is(err, ErrChecksum) || created {
				t.Errorf("%s, %d bytes, wrong checksum: Batch.Put = %v, %v, want ErrChecksum", name, len(data), created, err)
			}
			right := append(bytes.Clone(data), 'r')
			if created, err := b.Put(ctx, chunkKey(right), Checked(reader(right), CRC32C(right)), int64(len(right))); err != nil || !created {
				t.Errorf("%s, %d bytes, right checksum: Batch.Put = %v, %v, want true, nil", name, len(right), created, err)
			}
			if err := b.Commit(ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			wantMissing(t, s, key)
			if got := get(t, s, chunkKey(right)); !bytes.Equal(got, right) {
				t.Errorf("%s, %d bytes: the batch stored %d bytes, not the ones put", name, len(right), len(got))
			}
		}
	}
}

// TestFileChecked: the file backend refuses a Checked body whose bytes
// are not its checksum's through each of its write paths — Put, a batch
// writing with O_DIRECT, a batch writing through the page cache — and
// leaves nothing staged.
func TestFileChecked(t *testing.T) {
	for _, direct := range []bool{true, false} {
		dir := t.TempDir()
		s := openFileStore(t, dir, Options{})
		s.(*fileStore).noDirect.Store(!direct)
		testChecked(t, s)
		if names := stagedNames(t, dir); len(names) != 0 {
			t.Errorf("direct %v: staged after the refused Puts: %q", direct, names)
		}
	}
}

// flipProxy is a TLS endpoint on 127.0.0.1 in front of the test S3
// server (plain http) that flips one bit of the bodies of the PUT
// requests flip says to: what a faulty network card, a proxy or memory
// on the way does, which TLS, ending before the fault, does not see.
// Over https minio-go signs no payload (UNSIGNED-PAYLOAD), so only a
// checksum catches it.
type flipProxy struct {
	url     string // https://127.0.0.1:PORT
	client  *http.Transport
	flipped atomic.Int64
}

func newFlipProxy(t *testing.T, target string, flip func(r *http.Request, n int64) bool) *flipProxy {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &flipProxy{}
	var puts atomic.Int64
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(to)
		r.Out.Host = r.In.Host // the signature covers the Host the client sent
		if r.In.Method == http.MethodPut && r.In.ContentLength > 0 && flip(r.In, puts.Add(1)) {
			r.Out.Body = &flipBody{ReadCloser: r.In.Body, at: r.In.ContentLength / 2, p: p}
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rp, TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	p.url = "https://" + ln.Addr().String()
	p.client = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(p.client.CloseIdleConnections)
	return p
}

// flipBody flips the lowest bit of the byte at offset at.
type flipBody struct {
	io.ReadCloser
	at, n int64
	p     *flipProxy
}

func (f *flipBody) Read(b []byte) (int, error) {
	n, err := f.ReadCloser.Read(b)
	if i := f.at - f.n; i >= 0 && i < int64(n) {
		b[i] ^= 1
		f.p.flipped.Add(1)
	}
	f.n += int64(n)
	return n, err
}

// TestS3ChecksumInTransit: a Put's body changed between Kiln and the S3
// server is refused by the server (it carries its checksum: CRC-32C for a
// PUT, Content-MD5 for each part of a multipart upload) and sent again
// from the buffer; a body changed on every attempt fails the Put with
// ErrChecksum, told as a sentence, and stores nothing (no multipart
// upload left either). Without the checksum, over https, the changed
// bytes were stored as they arrived.
func TestS3ChecksumInTransit(t *testing.T) {
	srv := testS3Server(t)
	small := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: one PUT
	large, _ := io.ReadAll(newStream(3, 11<<20))            // 11 MiB: three 5 MiB parts
	for _, tc := range []struct {
		name  string
		data  []byte
		flips func(n int64) bool // the PUTs (counted from 1) whose body changes
		ok    bool
	}{
		{"one PUT, changed once", small, func(n int64) bool { return n == 1 }, true},
		{"one PUT, changed every time", small, func(int64) bool { return true }, false},
		{"multipart, a part changed once", large, func(n int64) bool { return n == 2 }, true},
		{"multipart, a part changed every time", large, func(n int64) bool { return n >= 2 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(srv.bucket(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			proxy := newFlipProxy(t, q.Get("endpoint"), func(_ *http.Request, n int64) bool { return tc.flips(n) })
			q.Set("endpoint", proxy.url)
			u.RawQuery = q.Encode()
			opts := srv.options()
			opts.Transport = proxy.client
			s, err := Open(t.Context(), u.String(), opts)
			if err != nil {
				t.Fatal(err)
			}
			key := chunkKey(tc.data)
			created, err := s.Put(t.Context(), key, bytes.NewReader(tc.data), int64(len(tc.data)))
			if proxy.flipped.Load() == 0 {
				t.Fatal("the proxy changed no byte")
			}
			if tc.ok {
				if err != nil || !created {
					t.Fatalf("Put = %v, %v, want true, nil (sent again after the refusal)", created, err)
				}
				if got := get(t, s, key); !bytes.Equal(got, tc.data) {
					t.Errorf("stored %d bytes, not the ones put", len(got))
				}
				return
			}
			if !errors.Is(err, ErrChecksum) || created {
				t.Fatalf("Put = %v, %v, want ErrChecksum", created, err)
			}
			if be, ok := errors.AsType[*Error](err); !ok || be.Public() != "the object store received bytes that differ from those sent (changed on the way); nothing was stored" {
				t.Errorf("Put's error %v: want *Error with the sentence", err)
			}
			if n := proxy.flipped.Load(); n != checksumAttempts {
				t.Errorf("the changed body was sent %d times, want %d", n, checksumAttempts)
			}
			wantMissing(t, s, key)
			srv.noUploads(t, s)
		})
	}
}
