package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotFound is returned by Get and Stat for a key that holds no blob.
var ErrNotFound = errors.New("blob not found")

// ErrInvalidKey is returned (wrapped, with the reason) for a key or a List
// prefix that breaks the key rules (see ValidateKey), or a backend's
// narrower limit: the file backend takes segments of at most 255 bytes (a
// file name), the S3 backend at most 1,024 bytes of prefix and key.
var ErrInvalidKey = errors.New("invalid blob key")

// Error is a failure of the store that a team may be told of (it ends in
// a snapshot's error field, an install's error): Reason is a sentence
// that names nothing of where the store is (no endpoint, bucket or
// prefix), Err the detail, which Error also gives, for the log. Every
// failure of the S3 backend's server, or of reaching it, is one.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Public is the sentence a team may read: Reason.
func (e *Error) Public() string { return e.Reason }

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 1024

// Info describes one stored blob.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is what every backend provides. All methods are safe for
// concurrent use.
type Store interface {
	// Put stores the size bytes of r under key unless a blob with that key
	// already exists, in which case r is not consumed beyond what is needed
	// and created is false. A blob is never visible half-written (readers
	// see nothing or all of it). size is exact (-1 = unknown): a reader
	// that ends early or holds more than size bytes fails the Put and
	// stores nothing. Returns ErrInvalidKey for a bad key.
	Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error)
	// Get opens the blob under key; ErrNotFound when missing.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the blob under key; ErrNotFound when missing.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the blob under key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn with every blob whose key starts with prefix, in any
	// order; an error from fn stops the listing and is returned as is.
	// A prefix whose directory part (up to its last "/") is not a valid
	// key is ErrInvalidKey.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// String describes the store in a form safe to log (never credentials).
	String() string
}

// Options carries what the operator gives besides the URL: the S3
// credentials (from flags or the environment, read by cmd/kiln) and the
// knobs tests need. The URL never holds a secret.
type Options struct {
	// AccessKeyID and SecretAccessKey sign S3 requests. Both empty means
	// anonymous requests. The file backend ignores them.
	AccessKeyID     string
	SecretAccessKey string `json:"-"`
	// Transport carries the S3 backend's requests; nil means minio-go's
	// settings with deadlines (deadline.go): Idle and Header.
	Transport http.RoundTripper
	// Idle bounds how long an S3 request may move no byte (0: 60 s);
	// Header how long its answer's headers may take once it is sent (0:
	// 60 s). With minio-go's 3 retries, a hung store fails a request in
	// about four times that, never later.
	Idle, Header time.Duration
	// CleanBefore: the file backend removes its temporary files (writes
	// in flight, so leftovers of a crash) modified before this time when it
	// opens. cmd/kiln passes the time the process started; zero removes
	// none.
	CleanBefore time.Time
	// PartSize is the S3 backend's part size: a larger blob is a
	// multipart upload of parts this size, and a Put holds at most one part
	// in memory. 0 means 16 MiB; S3's minimum is 5 MiB.
	PartSize int64
}

// String describes o without its secret, should Options ever be printed or
// logged.
func (o Options) String() string {
	return fmt.Sprintf("blob.Options{AccessKeyID: %q, SecretAccessKey: %s}", o.AccessKeyID, redacted(o.SecretAccessKey))
}

// GoString is String, so %#v does not print the secret either.
func (o Options) GoString() string { return o.String() }

// LogValue is what log/slog records of o: no secret.
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(slog.String("access_key_id", o.AccessKeyID), slog.String("secret_access_key", redacted(o.SecretAccessKey)))
}

func redacted(s string) string {
	if s == "" {
		return `""`
	}
	return "REDACTED"
}

// Open opens the store rawURL names:
//
//	file:///abs/dir                                  a local directory (created if missing)
//	s3://bucket/prefix?endpoint=URL&region=REGION     an S3-compatible bucket, path-style
//
// For s3, endpoint is the server's base URL (https://…; http:// to a
// loopback address, or to another host with insecure=true), region
// defaults to us-east-1 and prefix (optional) is put before every key. Open checks the URL, not the server: the first
// request reports an unreachable endpoint or refused credentials.
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse quotes the whole input; a URL holds no secret by
		// contract, but keep the message short anyway.
		return nil, fmt.Errorf("open blob store: invalid URL: %w", errors.Unwrap(err))
	}
	// Each case returns on error itself: a nil *fileStore in a Store
	// would not be a nil Store.
	switch u.Scheme {
	case "file":
		s, err := openFile(ctx, u, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case "s3":
		s, err := openS3(ctx, u, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("open blob store: unsupported scheme %q (want file:// or s3://)", u.Scheme)
	}
}

// ValidateKey reports whether key is a valid blob key: 1 to 1024 bytes of
// [a-z0-9._/-], no leading or trailing "/", no "//", no "." or ".."
// segment. The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if err := checkKey(key); err != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, err)
	}
	return nil
}

func checkKey(key string) string {
	switch {
	case key == "":
		return "empty"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("longer than %d bytes", MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Sprintf("byte %d is not one of [a-z0-9._/-]", i)
		}
	}
	if key[0] == '/' || key[len(key)-1] == '/' {
		return `starts or ends with "/"`
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return `contains "//"`
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	return ""
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-'
}

// checkPrefix validates a List prefix: its bytes are key bytes and its
// directory part (up to the last "/") is a valid key or empty. The last,
// partial segment may be anything a segment may start with.
func checkPrefix(prefix string) error {
	for i := 0; i < len(prefix); i++ {
		if !keyByte(prefix[i]) {
			return fmt.Errorf("%w: prefix %q: byte %d is not one of [a-z0-9._/-]", ErrInvalidKey, prefix, i)
		}
	}
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		if err := checkKey(prefix[:i]); err != "" {
			return fmt.Errorf("%w: prefix %q: %s", ErrInvalidKey, prefix, err)
		}
	}
	return nil
}

// sizeReader reads exactly size bytes from r (size >= 0) or everything
// (size < 0), failing when r ends early or, for a known size, holds more;
// it also stops when ctx is done. An excess is found before the last bytes
// are handed on, so the write they were for fails instead of completing.
type sizeReader struct {
	ctx  context.Context
	r    io.Reader
	size int64 // -1: unknown
	n    int64
	done bool // r was found to end at size
}

func (s *sizeReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	if s.size < 0 {
		n, err := s.r.Read(p)
		s.n += int64(n)
		return n, err
	}
	if s.done {
		return 0, io.EOF
	}
	rest := s.size - s.n
	if rest == 0 {
		return 0, s.end()
	}
	if int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	switch {
	case s.n == s.size && err == io.EOF:
		s.done = true
		return n, io.EOF
	case s.n == s.size && err == nil:
		if err := s.end(); err != io.EOF {
			return 0, err
		}
		return n, io.EOF
	case err == io.EOF:
		return n, fmt.Errorf("reader ended after %d of the declared %d bytes: %w", s.n, s.size, io.ErrUnexpectedEOF)
	}
	return n, err
}

// end checks that r holds nothing past the declared size: io.EOF if so.
func (s *sizeReader) end() error {
	var b [1]byte
	n, err := io.ReadFull(s.r, b[:])
	switch {
	case n > 0:
		return fmt.Errorf("reader holds more than the declared %d bytes", s.size)
	case err == io.EOF:
		s.done = true
		return io.EOF
	default:
		return err
	}
}
