package modcatalog

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnhq/kiln/internal/netguard"
)

// maxBody bounds an upstream answer. CurseForge's largest page (50 mods
// with their latest files) is a few hundred KiB; Modrinth's 100 hits less.
const maxBody = 8 << 20

// upstream is one catalog's HTTP API: its base URL, the headers every
// request carries, the retry policy and, for Modrinth, the rate limiter.
type upstream struct {
	name    string // "CurseForge", "Modrinth": starts the user's sentence
	label   string // CatalogCurseForge, CatalogModrinth: the metrics' label
	base    *url.URL
	client  *http.Client
	header  http.Header
	limiter *limiter // nil: no client-side limit
	opts    *Options
}

// getJSON requests base+path?query and decodes a 200 answer into v.
//
// Errors: ErrNotFound (404), *UpstreamError (anything else that is not a
// 200 with JSON, after retries), the context's error when ctx ended.
// Retried, at most Options.Attempts times in all: connection errors,
// timeouts of one attempt, 429 and 5xx. The wait before a retry is the
// answer's Retry-After (seconds or an HTTP date), else Modrinth's
// X-Ratelimit-Reset on a 429, else 250 ms doubling; a wait longer than
// Options.MaxRetryWait is not waited for: the call fails at once.
func (u *upstream) getJSON(ctx context.Context, path string, query url.Values, v any) error {
	target := u.base.JoinPath(path)
	target.RawQuery = query.Encode()
	var last *UpstreamError
	for attempt := 1; ; attempt++ {
		if u.limiter != nil {
			if err := u.limiter.wait(ctx); err != nil {
				return err
			}
		}
		retryAfter, err := u.attempt(ctx, target.String(), v)
		if err == nil || errors.Is(err, ErrNotFound) || ctx.Err() != nil {
			if ctx.Err() != nil && err != nil {
				return fmt.Errorf("%s: %w", u.name, context.Cause(ctx))
			}
			return err
		}
		ue, ok := errors.AsType[*UpstreamError](err)
		if !ok {
			return err
		}
		last = ue
		if retryAfter < 0 || attempt >= u.opts.Attempts {
			break
		}
		if retryAfter == 0 {
			retryAfter = 250 * time.Millisecond << (attempt - 1)
		}
		if retryAfter > u.opts.MaxRetryWait {
			last.Reason += fmt.Sprintf(" and asked to wait %s, longer than Kiln waits", retryAfter.Round(time.Second))
			return last
		}
		if err := u.opts.Sleep(ctx, retryAfter); err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
	}
	if u.opts.Attempts > 1 {
		last.Reason += fmt.Sprintf(" (%d attempts)", u.opts.Attempts)
	}
	return last
}

// attempt makes one request. retryAfter is how long to wait before trying
// again: negative when retrying is pointless, 0 for the default backoff.
func (u *upstream) attempt(ctx context.Context, target string, v any) (retryAfter time.Duration, err error) {
	actx, cancel := context.WithTimeout(ctx, u.opts.Timeout)
	defer cancel()
	// Latency is wall time whatever Options.Now says: it is a measure,
	// not a decision.
	start := time.Now()
	defer func() { u.opts.Metrics.ObserveCatalogRequest(u.label, outcome(ctx, err), time.Since(start)) }()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, target, nil)
	if err != nil {
		return -1, &UpstreamError{Catalog: u.name, Reason: "cannot be requested", Err: err}
	}
	for k, vs := range u.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, u.transportError(actx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound:
		return -1, ErrNotFound
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return u.retryAfter(resp), &UpstreamError{Catalog: u.name, Status: resp.StatusCode, Reason: "answered HTTP " + statusLine(resp.StatusCode)}
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		reason := "refused the request (HTTP " + statusLine(resp.StatusCode) + ")"
		if _, ok := u.header["X-Api-Key"]; ok {
			reason = "refused Kiln's API key (HTTP " + statusLine(resp.StatusCode) + "): the operator must check --curseforge-api-key"
		}
		return -1, &UpstreamError{Catalog: u.name, Status: resp.StatusCode, Reason: reason}
	default:
		return -1, &UpstreamError{Catalog: u.name, Status: resp.StatusCode, Reason: "answered HTTP " + statusLine(resp.StatusCode)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, u.transportError(actx, err)
	}
	if len(body) > maxBody {
		return -1, &UpstreamError{Catalog: u.name, Status: resp.StatusCode, Reason: fmt.Sprintf("sent an answer larger than %d MiB", maxBody>>20)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return -1, &UpstreamError{Catalog: u.name, Status: resp.StatusCode, Reason: "sent an answer that is not the JSON Kiln expects", Err: err}
	}
	return 0, nil
}

// transportError describes a failed connection or read; the attempt may
// be retried.
func (u *upstream) transportError(actx context.Context, err error) error {
	if ne, ok := errors.AsType[net.Error](err); errors.Is(actx.Err(), context.DeadlineExceeded) || (ok && ne.Timeout()) {
		return &UpstreamError{Catalog: u.name, Reason: "did not answer within " + u.opts.Timeout.String(), Err: err, timeout: true}
	}
	return &UpstreamError{Catalog: u.name, Reason: "could not be reached" + unreachable(err), Err: err}
}

// unreachable says in a few words why a connection failed, when the
// error says so in a way a user can act on; the whole error is logged.
// Addresses are not named: the catalog's host is the operator's.
func unreachable(err error) string {
	dns, isDNS := errors.AsType[*net.DNSError](err)
	_, blocked := errors.AsType[*netguard.BlockedError](err)
	_, badCert := errors.AsType[*tls.CertificateVerificationError](err)
	switch {
	case blocked:
		return ": its address is private or local, which Kiln refuses unless --pull-allow-cidr allows it"
	case isDNS && dns.IsNotFound:
		return ": its name does not resolve"
	case isDNS:
		return ": its name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return ": the connection was refused"
	case errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH):
		return ": there is no route to it"
	case badCert:
		return ": its TLS certificate was not accepted"
	}
	return ""
}

// retryAfter reads Retry-After (delta-seconds or an HTTP date) and, on a
// 429 without it, Modrinth's X-Ratelimit-Reset (seconds until the window
// resets). 0 means no hint.
func (u *upstream) retryAfter(resp *http.Response) time.Duration {
	if s := strings.TrimSpace(resp.Header.Get("Retry-After")); s != "" {
		if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs >= 0 {
			return max(time.Duration(secs)*time.Second, time.Millisecond)
		}
		if at, err := http.ParseTime(s); err == nil {
			return max(at.Sub(u.opts.Now()), time.Millisecond)
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if s := resp.Header.Get("X-Ratelimit-Reset"); s != "" {
			if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs >= 0 {
				return max(time.Duration(secs)*time.Second, time.Millisecond)
			}
		}
	}
	return 0
}

// statusLine is "500 Internal Server Error": the code and its standard
// text, never the upstream's reason phrase.
func statusLine(code int) string {
	if text := http.StatusText(code); text != "" {
		return fmt.Sprintf("%d %s", code, text)
	}
	return strconv.Itoa(code)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// outcome names how an attempt ended, for the metrics.
func outcome(ctx context.Context, err error) string {
	if err == nil {
		return OutcomeOK
	}
	if errors.Is(err, ErrNotFound) {
		return OutcomeNotFound
	}
	if ctx.Err() != nil {
		return OutcomeCanceled
	}
	ue, ok := errors.AsType[*UpstreamError](err)
	switch {
	case !ok:
		return OutcomeClientError
	case ue.Status == http.StatusTooManyRequests:
		return OutcomeRateLimited
	case ue.Status >= 500:
		return OutcomeServerError
	case ue.Status == http.StatusUnauthorized || ue.Status == http.StatusForbidden:
		return OutcomeRefused
	case ue.Status == http.StatusOK:
		return OutcomeInvalidAnswer
	case ue.Status != 0:
		return OutcomeClientError
	case ue.timeout:
		return OutcomeTimeout
	}
	return OutcomeUnreachable
}
