package blob

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// defaultPartSize is the S3 part size when Options.PartSize is 0: a Put of
// unknown size holds one part in memory.
const defaultPartSize = 16 << 20

// minPartSize is S3's smallest part (all but the last).
const minPartSize = 5 << 20

// s3Store is the S3 backend: one object per blob, named prefix + key, in
// one bucket, addressed path-style.
type s3Store struct {
	c        *minio.Client
	bucket   string
	prefix   string // "" or ends with "/"
	desc     string // String(): the URL without anything secret
	partSize uint64
	// unconditional is set once the server refused If-None-Match with
	// 501 Not Implemented: Puts then rely on Stat-then-Put (see doc.go).
	unconditional atomic.Bool
	// missingVerified is set once a GET confirmed that a HEAD's bare 404
	// meant NoSuchKey (see Stat).
	missingVerified atomic.Bool
}

// checkKey is ValidateKey, and the object name (the store's prefix and
// key) within S3's 1,024 bytes.
func (s *s3Store) checkKey(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if n := len(s.prefix) + len(key); n > MaxKeyLen {
		return fmt.Errorf("%w %q: %d bytes with the store's prefix, S3 allows %d", ErrInvalidKey, key, n, MaxKeyLen)
	}
	return nil
}

func openS3(_ context.Context, u *url.URL, opts Options) (*s3Store, error) {
	// Never echo u: whatever a wrong URL holds stays out of errors.
	if u.User != nil {
		return nil, errors.New("open blob store: an s3 URL carries no credentials (give them as options)")
	}
	bucket := u.Host
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		return nil, fmt.Errorf("open blob store: s3 bucket %q: %w", bucket, err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("open blob store: s3 prefix: %w", err)
		}
		prefix += "/"
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "insecure":
		default:
			return nil, fmt.Errorf("open blob store: unknown s3 URL parameter %q (want endpoint, region, insecure)", k)
		}
	}
	ep, err := url.Parse(q.Get("endpoint"))
	if err != nil || ep.Host == "" || ep.User != nil || (ep.Path != "" && ep.Path != "/") || ep.RawQuery != "" {
		return nil, errors.New("open blob store: s3 endpoint must be a base URL such as https://s3.example.com or http://127.0.0.1:9000")
	}
	insecure := q.Get("insecure") == "true"
	switch ep.Scheme {
	case "https":
	case "http":
		if !insecure && !loopback(ep.Hostname()) {
			return nil, fmt.Errorf("open blob store: s3 endpoint %s is plain http to a non-loopback host: use https, or add insecure=true to accept it", ep.Host)
		}
	default:
		return nil, fmt.Errorf("open blob store: s3 endpoint scheme %q (want https or http)", ep.Scheme)
	}
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	partSize := opts.PartSize
	if partSize == 0 {
		partSize = defaultPartSize
	}
	if partSize < minPartSize {
		return nil, fmt.Errorf("open blob store: s3 part size %d is below S3's minimum of %d", partSize, minPartSize)
	}
	var creds *credentials.Credentials
	if opts.AccessKeyID != "" || opts.SecretAccessKey != "" {
		creds = credentials.NewStaticV4(opts.AccessKeyID, opts.SecretAccessKey, "")
	} else {
		creds = credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}})
	}
	transport := opts.Transport
	if transport == nil {
		idle, header := opts.Idle, opts.Header
		if idle <= 0 {
			idle = defaultIdle
		}
		if header <= 0 {
			header = defaultHeader
		}
		transport = s3Transport(idle, header)
	}
	c, err := minio.New(ep.Host, &minio.Options{
		Creds:        creds,
		Secure:       ep.Scheme == "https",
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    transport,
		MaxRetries:   3,
	})
	if err != nil {
		return nil, fmt.Errorf("open blob store: s3 client: %w", err)
	}
	desc := url.Values{"endpoint": {ep.Scheme + "://" + ep.Host}, "region": {region}}
	if insecure {
		desc.Set("insecure", "true")
	}
	return &s3Store{
		c:        c,
		bucket:   bucket,
		prefix:   prefix,
		desc:     (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: desc.Encode()}).String(),
		partSize: uint64(partSize),
	}, nil
}

// loopback reports whether host is a loopback address or localhost: the
// only hosts plain http is accepted for without insecure=true.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *s3Store) String() string { return s.desc }

// s3Err is a failure of the server, or of reaching it, as an *Error. Its
// detail gives a server's refusal its code (AccessDenied,
// SignatureDoesNotMatch …) so the operator can tell a wrong credential
// from a missing bucket; minio-go's errors never hold the secret, but do
// name the endpoint, bucket and object (a request's URL, a response's
// BucketName and Key), so the sentence says only what happened.
func s3Err(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	var r minio.ErrorResponse
	switch {
	case badDigest(err) && errors.As(err, &r):
		return &Error{Reason: "the object store received bytes that differ from those sent (changed on the way); nothing was stored",
			Err: fmt.Errorf("s3 %s (%d): %w: %w", r.Code, r.StatusCode, ErrChecksum, err)}
	case errors.As(err, &r) && r.Code != "":
		return &Error{Reason: "the object store refused the request (" + refusal(r.Code) + ")",
			Err: fmt.Errorf("s3 %s (%d): %w", r.Code, r.StatusCode, err)}
	case errors.Is(err, context.Canceled):
		return &Error{Reason: "the request to the object store was canceled", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Reason: "the object store did not answer in time", Err: err}
	case errors.As(err, &r) && r.StatusCode != 0:
		return &Error{Reason: fmt.Sprintf("the object store refused the request (HTTP status %d)", r.StatusCode), Err: err}
	}
	return &Error{Reason: "the object store is unreachable", Err: err}
}

// refusal is an S3 error code as a team reads it: the usual ones in
// words, any other as the code (letters and digits only: it comes from
// the server).
func refusal(code string) string {
	switch code {
	case "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "ExpiredToken",
		"AllAccessDisabled", "AccountProblem", "XAdminUserNotFound":
		return "access denied"
	case minio.NoSuchBucket:
		return "no such bucket"
	case "SlowDown", "ServiceUnavailable", "RequestTimeout":
		return "busy"
	}
	if strings.IndexFunc(code, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) >= 0 || len(code) > 64 {
		return "an unknown error"
	}
	return code
}

// missing tells a missing object from every other failure.
func missing(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey
}

// Put stats key first (an existing blob costs one HEAD and r is not
// read). Then it reads r one part (Options.PartSize) at a time: a blob
// that fits one part is one PUT, a larger one a multipart upload, parts
// sent one after the other from one buffer. The PUT, or the multipart
// upload's completion, carries If-None-Match: * so that of racing Puts
// only one creates the object (see doc.go for servers without it).
func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error) {
	r, want, check := unwrapChecked(r)
	if err := s.checkKey(key); err != nil {
		return false, fmt.Errorf("put: %w", err)
	}
	switch _, err := s.Stat(ctx, key); {
	case err == nil:
		return false, nil
	case !errors.Is(err, ErrNotFound):
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	var sum *uint32
	if check {
		sum = &want
	}
	created, err = s.put(ctx, s.prefix+key, &sizeReader{ctx: ctx, r: r, size: size}, size, sum)
	switch {
	case err == nil:
		return created, nil
	case ctx.Err() != nil:
		return false, fmt.Errorf("put %s: %w", key, ctx.Err())
	default:
		return false, fmt.Errorf("put %s: %w", key, err)
	}
}

// put stores what sr holds under name; want, when set, is the CRC-32C
// the caller gave for the whole blob (Checked).
func (s *s3Store) put(ctx context.Context, name string, sr *sizeReader, size int64, want *uint32) (bool, error) {
	bufSize := int64(s.partSize)
	if size >= 0 && size < bufSize {
		bufSize = size
	}
	buf := make([]byte, bufSize)
	br := bufio.NewReader(sr)
	n, last, err := readPart(br, buf)
	if err != nil {
		return false, err
	}
	if last {
		return s.putOne(ctx, name, buf[:n], want)
	}
	return s.putMultipart(ctx, name, br, buf, want)
}

// readPart fills buf from br; last reports that br has nothing more.
func readPart(br *bufio.Reader, buf []byte) (n int, last bool, err error) {
	n, err = io.ReadFull(br, buf)
	switch err {
	case nil:
		if _, err := br.Peek(1); err == io.EOF {
			return n, true, nil
		} else if err != nil {
			return 0, false, err
		}
		return n, false, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return n, true, nil
	default:
		return 0, false, err
	}
}

// conditional is PutObjectOptions with If-None-Match: *, unless the server
// refused the header before.
func (s *s3Store) conditional() minio.PutObjectOptions {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	if !s.unconditional.Load() {
		opts.SetMatchETagExcept("*")
	}
	return opts
}

// summed is conditional with the body's CRC-32C in x-amz-checksum-crc32c,
// which the server checks against the bytes it receives (a mismatch is
// refused: BadDigest). minio-go sends its own checksums only with
// TrailingHeaders, as a trailer it computes while sending (and not at
// all over plain http, where it signs each chunk instead); a header from
// the buffer, computed before the request, goes the same way over both,
// through Core.PutObject (Client.PutObject refuses checksum headers
// without TrailingHeaders).
func (s *s3Store) summed(crc uint32) minio.PutObjectOptions {
	opts := s.conditional()
	opts.UserMetadata = map[string]string{"x-amz-checksum-crc32c": crc32cBase64(crc)}
	return opts
}

// checksumAttempts is how often a PUT or a part the server refused for
// its checksum (the bytes changed on the way) is sent again from its
// buffer before the Put fails with ErrChecksum.
const checksumAttempts = 3

// badDigest tells a server's refusal of a body that does not match its
// checksum (Content-MD5, x-amz-checksum-*, or the signed payload hash).
func badDigest(err error) bool {
	var r minio.ErrorResponse
	if !errors.As(err, &r) {
		return false
	}
	switch r.Code {
	case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch":
		return true
	}
	return false
}

// notImplemented tells a server's refusal of If-None-Match; from then on
// the store sends none.
func (s *s3Store) notImplemented(err error, opts minio.PutObjectOptions) bool {
	if minio.ToErrorResponse(err).StatusCode != http.StatusNotImplemented || opts.Header().Get("If-None-Match") == "" {
		return false
	}
	s.unconditional.Store(true)
	return true
}

// putOne stores data in one PUT carrying its CRC-32C (summed), checked
// first against the caller's (want) so that bytes changed between the
// caller and this buffer are never sent; a PUT the server refuses for its
// checksum is sent again, checksumAttempts times in all.
func (s *s3Store) putOne(ctx context.Context, name string, data []byte, want *uint32) (bool, error) {
	crc := CRC32C(data)
	if want != nil && crc != *want {
		return false, fmt.Errorf("%w: the bytes to send have CRC-32C %08x, the caller's is %08x", ErrChecksum, crc, *want)
	}
	core := minio.Core{Client: s.c}
	var err error
	for range checksumAttempts {
		opts := s.summed(crc)
		_, err = core.PutObject(ctx, s.bucket, name, bytes.NewReader(data), int64(len(data)), "", "", opts)
		if s.notImplemented(err, opts) {
			_, err = core.PutObject(ctx, s.bucket, name, bytes.NewReader(data), int64(len(data)), "", "", s.summed(crc))
		}
		if !badDigest(err) {
			break
		}
	}
	return putResult(err)
}

// putResult maps a PUT's (or a completion's) answer to created: 412 means
// the object exists, stored meanwhile by another Put.
func putResult(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed:
		return false, nil
	default:
		return false, s3Err(err)
	}
}

// maxParts is S3's limit on a multipart upload's parts.
const maxParts = 10000

// putMultipart uploads buf (full) and what follows in br as the parts of
// one multipart upload, and aborts it on any failure. minio-go's own
// PutObject is not used for this: it leaves If-None-Match out of the
// completion (v7.4.1, completeUploadOpts), which is where S3 evaluates it.
// Each part carries its Content-MD5, which every S3 server checks (a part
// refused for it is sent again, checksumAttempts times in all); the
// blob's CRC-32C, summed over the parts as they are sent, is checked
// against the caller's (want) before the upload is completed.
func (s *s3Store) putMultipart(ctx context.Context, name string, br *bufio.Reader, buf []byte, want *uint32) (created bool, err error) {
	core := minio.Core{Client: s.c}
	id, err := core.NewMultipartUpload(ctx, s.bucket, name, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return false, fmt.Errorf("start multipart upload: %w", s3Err(err))
	}
	completed := false
	defer func() {
		if !completed {
			// Abort even when ctx is done, but not forever.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			core.AbortMultipartUpload(actx, s.bucket, name, id)
		}
	}()
	var parts []minio.CompletePart
	var crc uint32
	n, last := len(buf), false
	for num := 1; ; num++ {
		if num > maxParts {
			return false, fmt.Errorf("more than %d parts of %d bytes", maxParts, len(buf))
		}
		crc = crc32.Update(crc, castagnoli, buf[:n])
		sum := md5.Sum(buf[:n])
		popts := minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(sum[:])}
		var p minio.ObjectPart
		for range checksumAttempts {
			p, err = core.PutObjectPart(ctx, s.bucket, name, id, num, bytes.NewReader(buf[:n]), int64(n), popts)
			if !badDigest(err) {
				break
			}
		}
		if err != nil {
			return false, fmt.Errorf("upload part %d: %w", num, s3Err(err))
		}
		parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag})
		if last {
			break
		}
		if n, last, err = readPart(br, buf); err != nil {
			return false, err
		}
	}
	if want != nil && crc != *want {
		return false, fmt.Errorf("%w: the bytes sent have CRC-32C %08x, the caller's is %08x", ErrChecksum, crc, *want)
	}
	opts := s.conditional()
	_, err = core.CompleteMultipartUpload(ctx, s.bucket, name, id, parts, opts)
	if s.notImplemented(err, opts) {
		_, err = core.CompleteMultipartUpload(ctx, s.bucket, name, id, parts, s.conditional())
	}
	created, err = putResult(err)
	completed = err == nil && created
	return created, err
}

// Get opens the object under key; the body streams from the server.
func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.checkKey(key); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	core := minio.Core{Client: s.c}
	body, _, _, err := core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if missing(err) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, s3Err(err))
	}
	return s3Body{body}, nil
}

// s3Body is an object's body whose read errors (a connection cut
// mid-stream names the endpoint) are s3Err's.
type s3Body struct{ io.ReadCloser }

func (b s3Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = s3Err(err)
	}
	return n, err
}

// Stat heads the object under key.
func (s *s3Store) Stat(ctx context.Context, key string) (Info, error) {
	if err := s.checkKey(key); err != nil {
		return Info{}, fmt.Errorf("stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	oi, err := s.c.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if missing(err) && !s.missingVerified.Load() {
		// A HEAD's answer has no body: minio-go calls any 404 NoSuchKey.
		// Some servers answer 404 to an unknown access key or bucket
		// (versitygw: XAdminUserNotFound), which must not pass for a
		// missing blob. A GET's body names the real error; once it said
		// NoSuchKey, the credentials and the bucket are known good.
		body, goi, _, gerr := minio.Core{Client: s.c}.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
		switch {
		case gerr == nil:
			body.Close() // created meanwhile
			oi, err = goi, nil
		case missing(gerr):
			s.missingVerified.Store(true)
		default:
			err = gerr
		}
	}
	if missing(err) {
		return Info{}, fmt.Errorf("stat %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, s3Err(err))
	}
	return Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// Delete removes the object under key; S3 answers a missing key like a
// deleted one.
func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && !missing(err) {
		return fmt.Errorf("delete %s: %w", key, s3Err(err))
	}
	return nil
}

// List pages through ListObjectsV2 (1,000 keys a request), one page in
// memory at a time; objects that are no valid key (another tool's, or a
// "directory" marker) are left out.
func (s *s3Store) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("list %q: %w", prefix, ctx.Err())
			}
			return fmt.Errorf("list %q: %w", prefix, s3Err(oi.Err))
		}
		key, ok := strings.CutPrefix(oi.Key, s.prefix)
		if !ok || ValidateKey(key) != nil {
			continue
		}
		if err := fn(Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	// The iterator ends quietly when ctx is done.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	return nil
}
