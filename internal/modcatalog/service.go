package modcatalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/kilnhq/kiln/internal/netguard"
)

// Default base URLs of the catalogs.
const (
	DefaultCurseForgeURL = "https://api.curseforge.com"
	DefaultModrinthURL   = "https://api.modrinth.com"
)

// ErrClosed is returned once Close has been called.
var ErrClosed = errors.New("the mod catalogs are shutting down")

// Options configure a Service; zero values take the defaults.
type Options struct {
	// CurseForgeURL and ModrinthURL are the catalogs' base URLs (defaults
	// DefaultCurseForgeURL, DefaultModrinthURL): http or https, no query.
	CurseForgeURL string
	ModrinthURL   string
	// CurseForgeKey is the CurseForge Core API key, sent as x-api-key.
	// Empty: every CurseForge method returns ErrNotConfigured.
	CurseForgeKey string
	// UserAgent is sent with every request. Modrinth requires one that
	// names the software, its version and a contact; default
	// "kilnhq/kiln (https://github.com/kilnhq/kiln)".
	UserAgent string
	// Timeout bounds one attempt, connection to last byte (default 10 s).
	Timeout time.Duration
	// Attempts is how many times a call is tried in all when the upstream
	// fails with a 5xx, a 429, a timeout or a connection error (default 3).
	Attempts int
	// MaxRetryWait is the longest wait before a retry Kiln accepts (from
	// Retry-After); a longer one fails the call at once (default 5 s).
	MaxRetryWait time.Duration
	// CacheTTL is how long a successful answer is served from memory
	// (default 5 min; negative disables the cache).
	CacheTTL time.Duration
	// CacheEntries and CacheBytes bound the cache (defaults 2,000 entries
	// and 64 MiB, counted as the answers' JSON sizes).
	CacheEntries int
	CacheBytes   int64
	// ModrinthPerMinute is the most requests sent to Modrinth in any
	// minute (default 300, Modrinth's limit per IP).
	ModrinthPerMinute int
	// Metrics records upstream requests and cache lookups;
	// *metrics.Catalog implements it. nil records nothing.
	Metrics Metrics
	// Now and Sleep are the clock (cache expiry, Retry-After dates, the
	// limiter) and the wait between retries and for the limiter; tests
	// replace them (defaults time.Now and a timer).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

func (o *Options) defaults() {
	if o.CurseForgeURL == "" {
		o.CurseForgeURL = DefaultCurseForgeURL
	}
	if o.ModrinthURL == "" {
		o.ModrinthURL = DefaultModrinthURL
	}
	if o.UserAgent == "" {
		o.UserAgent = "kilnhq/kiln (https://github.com/kilnhq/kiln)"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = 5 * time.Second
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = 5 * time.Minute
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = 2000
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.ModrinthPerMinute <= 0 {
		o.ModrinthPerMinute = 300
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
}

// Metrics is where a Service records what it does (Prometheus, in
// kiln serve). catalog is CatalogCurseForge or CatalogModrinth; outcome
// one of the Outcome constants.
type Metrics interface {
	ObserveCatalogRequest(catalog, outcome string, d time.Duration)
	ObserveCatalogCache(catalog string, hit bool)
}

// Outcomes of one upstream request, the outcome label of
// kiln_catalog_upstream_requests_total.
const (
	OutcomeOK            = "ok"             // 200 with the JSON expected
	OutcomeNotFound      = "not_found"      // 404
	OutcomeRateLimited   = "rate_limited"   // 429
	OutcomeServerError   = "server_error"   // 5xx
	OutcomeRefused       = "refused"        // 401, 403 (a bad key)
	OutcomeClientError   = "client_error"   // another status
	OutcomeInvalidAnswer = "invalid_answer" // not the JSON expected, or too large
	OutcomeTimeout       = "timeout"        // no answer within Options.Timeout
	OutcomeUnreachable   = "unreachable"    // connection refused, DNS, netguard
	OutcomeCanceled      = "canceled"       // Close, or every caller gone
)

type noMetrics struct{}

func (noMetrics) ObserveCatalogRequest(string, string, time.Duration) {}
func (noMetrics) ObserveCatalogCache(string, bool)                    {}

// Service answers the catalog endpoints of api.md §7 from CurseForge and
// Modrinth: validated queries, normalized answers, cached. It is safe for
// concurrent use; call Close when done.
type Service struct {
	opts       Options
	client     *http.Client
	curseforge *upstream // nil when no key is configured
	modrinth   *upstream
	cache      *cache
	flights    singleflight.Group

	base   context.Context // parent of every upstream call; Close cancels it
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // upstream calls in flight
}

// New returns a Service whose requests connect only as policy allows
// (netguard: no private addresses unless the operator's allow list says
// so). It returns an error for a base URL that is not an absolute http or
// https URL without query or user information.
func New(policy *netguard.Policy, opts Options) (*Service, error) {
	opts.defaults()
	cf, err := parseBase("CurseForge", opts.CurseForgeURL)
	if err != nil {
		return nil, err
	}
	mr, err := parseBase("Modrinth", opts.ModrinthURL)
	if err != nil {
		return nil, err
	}
	base := &http.Transport{
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   opts.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	client := policy.Client(base)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		opts:   opts,
		client: client,
		cache:  newCache(opts.CacheTTL, opts.CacheEntries, opts.CacheBytes, opts.Now),
		base:   ctx,
		cancel: cancel,
	}
	ua := http.Header{"User-Agent": {opts.UserAgent}}
	if opts.CurseForgeKey != "" {
		h := ua.Clone()
		h.Set("X-Api-Key", opts.CurseForgeKey)
		s.curseforge = &upstream{name: "CurseForge", label: CatalogCurseForge, base: cf, client: client, header: h, opts: &s.opts}
	}
	s.modrinth = &upstream{
		name: "Modrinth", label: CatalogModrinth, base: mr, client: client, header: ua.Clone(), opts: &s.opts,
		limiter: newLimiter(opts.ModrinthPerMinute, opts.Now, opts.Sleep),
	}
	return s, nil
}

func parseBase(name, raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s base URL %q: %w", name, raw, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return nil, fmt.Errorf("%s base URL %q: must be an absolute http or https URL", name, raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%s base URL %q: must not carry user information, a query or a fragment", name, raw)
	}
	return u, nil
}

// CurseForgeConfigured reports whether a CurseForge API key is set.
func (s *Service) CurseForgeConfigured() bool { return s.curseforge != nil }

// Close stops the upstream calls in flight (their callers get ErrClosed or
// the context error) and waits for them.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.client.CloseIdleConnections()
}

// fetch answers key from the cache, else calls load once for all
// concurrent callers of the same key and caches its value. load runs in a
// context that keeps ctx's values but not its cancellation (a caller that
// leaves does not fail the others); Close cancels it. The call is bounded
// by Attempts × Timeout plus the retry waits.
func fetch[T any](ctx context.Context, s *Service, up *upstream, key string, load func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	v, ok := s.cache.get(key)
	if s.cache.enabled() {
		s.opts.Metrics.ObserveCatalogCache(up.label, ok)
	}
	if ok {
		return v.(T), nil
	}
	ch := s.flights.DoChan(key, func() (any, error) {
		if !s.track() {
			return nil, ErrClosed
		}
		defer s.wg.Done()
		// A flight that ended between our cache miss and DoChan has
		// filled the cache: no second upstream call.
		if v, ok := s.cache.get(key); ok {
			return v, nil
		}
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(s.base, cancel)
		defer stop()
		v, err := load(lctx)
		if err != nil {
			if s.base.Err() != nil {
				return nil, ErrClosed
			}
			return nil, err
		}
		s.cache.put(key, v, encodedSize(v))
		return v, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return zero, r.Err
		}
		return r.Val.(T), nil
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}

// track counts an upstream call for Close; false once closed.
func (s *Service) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// encodedSize is the cache's cost of a value: the length of its JSON, the
// answer Kiln writes. Measured against the live heap
// (BenchmarkCacheMemory), a cached answer holds about its JSON's size.
func encodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return maxBody // not expected of our types; count it as the largest
	}
	return len(b)
}
