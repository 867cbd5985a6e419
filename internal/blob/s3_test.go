package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Server is the S3-compatible server scripts/test starts (versitygw),
// as KILN_TEST_S3_* describe it.
type s3Server struct {
	url       *url.URL // s3://bucket/prefix?endpoint=…: the bucket is a base name
	accessKey string
	secretKey string
	admin     *minio.Client // makes and removes the tests' buckets
}

func testS3Server(t *testing.T) *s3Server {
	t.Helper()
	raw := os.Getenv("KILN_TEST_S3_URL")
	if raw == "" {
		if os.Getenv("KILN_REQUIRE_S3") == "1" {
			t.Fatal("KILN_REQUIRE_S3=1 but KILN_TEST_S3_URL is not set (scripts/test starts versitygw)")
		}
		t.Skip("SKIP S3 SUITE: KILN_TEST_S3_URL not set (scripts/test starts versitygw)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("KILN_TEST_S3_URL: %v", err)
	}
	ep, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || ep.Hostname() != "127.0.0.1" {
		t.Fatalf("KILN_TEST_S3_URL: the endpoint must be http://127.0.0.1:PORT, got %q", u.Query().Get("endpoint"))
	}
	s := &s3Server{url: u, accessKey: os.Getenv("KILN_TEST_S3_ACCESS_KEY"), secretKey: os.Getenv("KILN_TEST_S3_SECRET_KEY")}
	s.admin, err = minio.New(ep.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.accessKey, s.secretKey, ""),
		Region:       u.Query().Get("region"),
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bucket makes a fresh bucket, removed with what it holds when the test
// ends, and returns the store URL naming it.
func (s *s3Server) bucket(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("%s-%x", s.url.Host, rand.Uint64())
	if err := s.admin.MakeBucket(t.Context(), name, minio.MakeBucketOptions{Region: s.url.Query().Get("region")}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		results, err := s.admin.RemoveObjectsWithIter(ctx, name, s.admin.ListObjectsIter(ctx, name, minio.ListObjectsOptions{Recursive: true}), minio.RemoveObjectsOptions{})
		if err != nil {
			t.Errorf("empty bucket %s: %v", name, err)
			return
		}
		for r := range results {
			if r.Err != nil {
				t.Errorf("empty bucket %s: %s: %v", name, r.ObjectName, r.Err)
			}
		}
		if err := s.admin.RemoveBucket(ctx, name); err != nil {
			t.Errorf("remove bucket %s: %v", name, err)
		}
	})
	u := *s.url
	u.Host = name
	return u.String()
}

func (s *s3Server) options() Options {
	return Options{AccessKeyID: s.accessKey, SecretAccessKey: s.secretKey, PartSize: minPartSize}
}

func (s *s3Server) open(t *testing.T) Store {
	t.Helper()
	st, err := Open(t.Context(), s.bucket(t), s.options())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return st
}

func TestS3Store(t *testing.T) {
	srv := testS3Server(t)
	testStore(t, srv.open)
}

// streamReader yields n pseudo-random bytes without holding them, hiding
// every interface but Read, as a snapshot's chunk stream would.
type streamReader struct {
	rng *rand.ChaCha8
	n   int64
}

func newStream(seed byte, n int64) *streamReader {
	return &streamReader{rng: rand.NewChaCha8([32]byte{seed}), n: n}
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	n, _ := r.rng.Read(p)
	r.n -= int64(n)
	return n, nil
}

func streamSum(t *testing.T, r io.Reader) ([32]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil)), n
}

// A 20 MiB object streams in 5 MiB parts, its size known or not.
func TestS3Large(t *testing.T) {
	srv := testS3Server(t)
	s := srv.open(t)
	const size = 20 << 20
	want, _ := streamSum(t, newStream(1, size))
	for _, declared := range []int64{-1, size} {
		key := fmt.Sprint("manifests/large", declared)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		created, err := s.Put(t.Context(), key, newStream(1, size), declared)
		runtime.ReadMemStats(&after)
		if err != nil || !created {
			t.Fatalf("Put(%s, 20 MiB, size %d) = %v, %v, want true, nil", key, declared, created, err)
		}
		// One part's buffer (5 MiB here) and the HTTP client's own: about
		// 9 MiB allocated in all, never the object whole.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*minPartSize {
			t.Errorf("Put(%s, 20 MiB, size %d) allocated %d bytes, want at most 3 parts (%d)", key, declared, alloc, 3*minPartSize)
		}
		info, err := s.Stat(t.Context(), key)
		if err != nil || info.Size != size {
			t.Errorf("Stat(%s) = %+v, %v, want size %d", key, info, err, size)
		}
		rc, err := s.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%s): %v", key, err)
		}
		got, n := streamSum(t, rc)
		rc.Close()
		if got != want || n != size {
			t.Errorf("Get(%s): %d bytes, sha256 %x, want %d bytes, %x", key, n, got, size, want)
		}
	}
	// A failing reader aborts the multipart upload: nothing is visible.
	created, err := s.Put(t.Context(), "manifests/broken", io.MultiReader(newStream(2, 12<<20), &failingReader{}), -1)
	if !errors.Is(err, errReader) || created {
		t.Errorf("Put(reader failing after 12 MiB) = %v, %v, want an error wrapping %v", created, err, errReader)
	}
	wantMissing(t, s, "manifests/broken")
	srv.noUploads(t, s)
}

// noUploads fails the test if a multipart upload was left in s's bucket.
func (srv *s3Server) noUploads(t *testing.T, s Store) {
	t.Helper()
	bucket := s.(*s3Store).bucket
	res, err := minio.Core{Client: srv.admin}.ListMultipartUploads(t.Context(), bucket, "", "", "", "", 100)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	for _, u := range res.Uploads {
		t.Errorf("multipart upload of %s left behind", u.Key)
	}
}

// List pages: more than the 1,000 keys one ListObjectsV2 answer holds,
// and only the store's prefix of the bucket.
func TestS3ListPages(t *testing.T) {
	srv := testS3Server(t)
	bucketURL := srv.bucket(t)
	s, err := Open(t.Context(), bucketURL, srv.options())
	if err != nil {
		t.Fatal(err)
	}
	const n = 1100
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				if _, err := s.Put(t.Context(), k, strings.NewReader(k), int64(len(k))); err != nil {
					t.Errorf("Put(%s): %v", k, err)
				}
			}
		})
	}
	for i := range n {
		keys <- fmt.Sprintf("chunks/%02x/%064x", i%256, i)
	}
	keys <- "manifests/m"
	close(keys)
	wg.Wait()
	// Outside the store's prefix: another tool's objects in the bucket.
	u, _ := url.Parse(bucketURL)
	for _, k := range []string{"outside/chunks/00/x", "blobsx/chunks/00/y"} {
		if _, err := srv.admin.PutObject(t.Context(), u.Host, k, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	seen := map[string]bool{}
	err = s.List(t.Context(), "chunks/", func(i Info) error {
		if seen[i.Key] {
			t.Errorf("List reported %s twice", i.Key)
		}
		seen[i.Key] = true
		if i.Size != int64(len(i.Key)) {
			t.Errorf("List: %s has size %d, want %d", i.Key, i.Size, len(i.Key))
		}
		return nil
	})
	if err != nil || len(seen) != n {
		t.Errorf("List(chunks/) = %d keys, %v, want %d, nil", len(seen), err, n)
	}
	if got := listKeys(t, s, ""); len(got) != n+1 {
		t.Errorf("List(\"\") = %d keys, want %d (the store's only)", len(got), n+1)
	}
	if got := listKeys(t, s, "chunks/0a/"); len(got) != 5 { // i = 10, 266, 522, 778, 1034
		t.Errorf("List(chunks/0a/) = %q, want 5 keys", got)
	}
}

// A wrong credential is an error that says so and never holds a secret.
func TestS3BadCredentials(t *testing.T) {
	srv := testS3Server(t)
	bucketURL := srv.bucket(t)
	const wrongSecret = "wrong-secret-0123456789"
	for name, opts := range map[string]Options{
		"wrong secret":     {AccessKeyID: srv.accessKey, SecretAccessKey: wrongSecret},
		"wrong access key": {AccessKeyID: "nobody", SecretAccessKey: wrongSecret},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.Context(), bucketURL, opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			_, perr := s.Put(t.Context(), "manifests/m", strings.NewReader("x"), 1)
			_, serr := s.Stat(t.Context(), "manifests/m")
			_, gerr := s.Get(t.Context(), "manifests/m")
			lerr := s.List(t.Context(), "", func(Info) error { return nil })
			for call, err := range map[string]error{"Put": perr, "Stat": serr, "Get": gerr, "List": lerr} {
				if err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("%s with a %s = %v, want a refusal", call, name, err)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, "s3 ") || !strings.ContainsAny(msg, "0123456789") {
					t.Errorf("%s with a %s: %q does not name the server's code and status", call, name, msg)
				}
				if strings.Contains(msg, wrongSecret) || strings.Contains(msg, srv.secretKey) {
					t.Errorf("%s with a %s: the error %q holds a secret", call, name, msg)
				}
			}
			t.Logf("Put with a %s: %v", name, perr)
		})
	}
}

// TestS3ErrorsTold: every call to a store the server refuses or that
// nothing answers fails with an *Error whose sentence, the one a team may
// read, names neither the endpoint, the bucket nor the prefix; the
// detail, for the log, keeps the server's code.
func TestS3ErrorsTold(t *testing.T) {
	srv := testS3Server(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	ep, err := url.Parse(srv.url.Query().Get("endpoint"))
	if err != nil {
		t.Fatal(err)
	}
	existing, err := url.Parse(srv.bucket(t))
	if err != nil {
		t.Fatal(err)
	}
	missing := fmt.Sprintf("%s-missing-%x", srv.url.Host, rand.Uint64())
	for _, tc := range []struct {
		name, bucket, host, secret, want, detail string
	}{
		{"missing bucket", missing, ep.Host, srv.secretKey, "the object store refused the request (no such bucket)", "s3 NoSuchBucket (404)"},
		{"wrong secret", existing.Host, ep.Host, "wrong-secret-0123456789", "the object store refused the request (access denied)", "s3 "},
		{"unreachable", existing.Host, dead, srv.secretKey, "the object store is unreachable", dead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const prefix = "tenant-prefix-7f3a"
			u := *srv.url
			u.Host, u.Path = tc.bucket, "/"+prefix
			q := u.Query()
			q.Set("endpoint", "http://"+tc.host)
			u.RawQuery = q.Encode()
			s, err := Open(t.Context(), u.String(), Options{AccessKeyID: srv.accessKey, SecretAccessKey: tc.secret})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			_, perr := s.Put(t.Context(), "manifests/m", strings.NewReader("x"), 1)
			_, serr := s.Stat(t.Context(), "manifests/m")
			_, gerr := s.Get(t.Context(), "manifests/m")
			derr := s.Delete(t.Context(), "manifests/m")
			lerr := s.List(t.Context(), "", func(Info) error { return nil })
			for call, err := range map[string]error{"Put": perr, "Stat": serr, "Get": gerr, "Delete": derr, "List": lerr} {
				e, ok := errors.AsType[*Error](err)
				if !ok {
					t.Errorf("%s = %v, want an *Error", call, err)
					continue
				}
				if e.Public() != tc.want {
					t.Errorf("%s: Public() = %q, want %q", call, e.Public(), tc.want)
				}
				for _, where := range []string{tc.host, tc.bucket, prefix} {
					if strings.Contains(e.Public(), where) {
						t.Errorf("%s: Public() = %q names %s", call, e.Public(), where)
					}
				}
				if !strings.Contains(err.Error(), tc.detail) {
					t.Errorf("%s: Error() = %q, want the detail %q in it", call, err, tc.detail)
				}
			}
		})
	}
}

func TestS3String(t *testing.T) {
	const secret = "s3cr3t-do-not-print"
	opts := Options{AccessKeyID: "AKID", SecretAccessKey: secret}
	s, err := Open(t.Context(), "s3://kiln/snaps?endpoint=http://127.0.0.1:9000&region=eu-west-1", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := "s3://kiln/snaps/?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1"
	if got := s.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(f, opts); strings.Contains(got, secret) {
			t.Errorf("Sprintf(%q, opts) = %q: holds the secret", f, got)
		}
	}
	if got := fmt.Sprintf("%+v", s); strings.Contains(got, secret) {
		t.Errorf("Sprintf(%%+v, store) holds the secret")
	}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		slog.New(h).Info("open", "opts", opts, "store", s)
	}
	if b, _ := json.Marshal(opts); strings.Contains(buf.String()+string(b), secret) || !strings.Contains(buf.String(), "AKID") {
		t.Errorf("logged Options = %s, json %s: want the access key id and no secret", buf.String(), b)
	}
}

func TestOpenS3URLs(t *testing.T) {
	opts := Options{AccessKeyID: "AKID", SecretAccessKey: "s3cr3t"}
	for _, good := range []string{
		"s3://kiln?endpoint=https://s3.example.com",
		"s3://kiln/a/b?endpoint=https://s3.example.com:9443&region=auto",
		"s3://kiln?endpoint=http://localhost:9000",
		"s3://kiln?endpoint=http://[::1]:9000",
		"s3://kiln?endpoint=http://10.0.0.5:9000&insecure=true",
	} {
		if _, err := Open(t.Context(), good, opts); err != nil {
			t.Errorf("Open(%q): %v", good, err)
		}
	}
	for name, bad := range map[string]string{
		"credentials in the URL":   "s3://AKID:s3cr3t@kiln?endpoint=https://s3.example.com",
		"credentials in endpoint":  "s3://kiln?endpoint=https://AKID:s3cr3t@s3.example.com",
		"no endpoint":              "s3://kiln",
		"no bucket":                "s3:///prefix?endpoint=https://s3.example.com",
		"bad bucket":               "s3://Kiln_Bucket?endpoint=https://s3.example.com",
		"bad prefix":               "s3://kiln/../x?endpoint=https://s3.example.com",
		"plain http, remote":       "s3://kiln?endpoint=http://s3.example.com",
		"endpoint with a path":     "s3://kiln?endpoint=https://s3.example.com/bucket",
		"endpoint scheme":          "s3://kiln?endpoint=ftp://s3.example.com",
		"unknown parameter":        "s3://kiln?endpoint=https://s3.example.com&secret=s3cr3t",
		"part size below S3's min": "",
	} {
		o := opts
		if bad == "" {
			bad, o.PartSize = "s3://kiln?endpoint=https://s3.example.com", 1<<20
		}
		s, err := Open(t.Context(), bad, o)
		if err == nil {
			t.Errorf("%s: Open(%q) = %v, want an error", name, bad, s)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: Open's error %q holds the secret", name, err)
		}
	}
}

// The put-if-absent race is decided by the server (If-None-Match: *):
// after a Put's Stat found nothing, a Put of the same key by another
// client in between makes it report created = false, for a single PUT as
// for a multipart upload (If-None-Match on its completion).
func TestS3ConditionalPut(t *testing.T) {
	srv := testS3Server(t)
	bucketURL := srv.bucket(t)
	s, err := Open(t.Context(), bucketURL, srv.options())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(bucketURL)
	for i, tc := range []struct {
		name      string
		len, size int64
	}{
		{"one PUT", 1000, 1000},
		{"one PUT, size unknown", 1000, -1},
		{"multipart", 6 << 20, -1},
		{"multipart, size known", 6 << 20, 6 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := io.ReadAll(newStream(byte(10+i), tc.len))
			key := chunkKey(data)
			// The reader's first Read comes after Put's Stat: another
			// client stores the object right then.
			r := &hookReader{r: bytes.NewReader(data), hook: func() {
				if _, err := srv.admin.PutObject(t.Context(), u.Host, "blobs/"+key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
					t.Errorf("PutObject by another client: %v", err)
				}
			}}
			created, err := s.Put(t.Context(), key, r, tc.size)
			if err != nil || created {
				t.Errorf("Put racing another client's = %v, %v, want false, nil", created, err)
			}
			if got := get(t, s, key); !bytes.Equal(got, data) {
				t.Errorf("Get(%s) after the race: %d bytes, want the %d stored", key, len(got), len(data))
			}
		})
	}
	srv.noUploads(t, s)
}

// hookReader calls hook once, before its first Read.
type hookReader struct {
	r    io.Reader
	hook func()
	once sync.Once
}

func (h *hookReader) Read(p []byte) (int, error) {
	h.once.Do(h.hook)
	return h.r.Read(p)
}

// S3 limits the object name, the store's prefix included, to 1,024
// bytes: a longer one is refused before any request.
func TestS3KeyLimit(t *testing.T) {
	s, err := Open(t.Context(), "s3://kiln/blobs?endpoint=http://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("a", MaxKeyLen-len("blobs/")+1)
	if _, err := s.Put(t.Context(), key, strings.NewReader("x"), 1); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Put(%d-byte key under blobs/) error = %v, want ErrInvalidKey", len(key), err)
	}
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Stat(%d-byte key under blobs/) error = %v, want ErrInvalidKey", len(key), err)
	}
}
