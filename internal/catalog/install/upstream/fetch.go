package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Limits of what an upstream may send.
const (
	DefaultMetaMax     = 16 << 20  // one metadata (JSON, sidecar) response
	DefaultArtifactMax = 512 << 20 // one jar
	MetaTimeout        = 30 * time.Second
	DownloadTimeout    = 15 * time.Minute
)

// ErrTooLarge is returned when an upstream answer is larger than allowed
// (16 MiB of metadata, 512 MiB for an artifact).
var ErrTooLarge = errors.New("upstream response too large")

// StatusError reports an upstream answer that is not 2xx.
type StatusError struct {
	URL     string // the URL requested (the mirror's when one is set)
	Status  int    // HTTP status of the upstream answer
	Message string // reason given in the body, if any
}

func (e *StatusError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("upstream %s answered %d: %s", e.URL, e.Status, e.Message)
	}
	return fmt.Sprintf("upstream %s answered %d", e.URL, e.Status)
}

// Fetcher makes every request to an upstream: it applies the mirror, sets
// the User-Agent, refuses non-2xx answers and caps response sizes.
type Fetcher struct {
	Client    *http.Client
	UserAgent string
	Mirror    string // "" or the mirror base URL without a trailing slash
	MetaMax   int64  // the largest metadata answer read (DefaultMetaMax)
}

// Target returns the URL to request for an upstream URL. Without a mirror
// it is the URL itself, which must be https. With a mirror the scheme is
// dropped and the host becomes the first path segment under the mirror:
// https://fill.papermc.io/v3/projects/paper → <mirror>/fill.papermc.io/v3/projects/paper
// (the query is kept). URLs found inside upstream answers go through the
// same function, so one mirror serves every upstream.
func (f *Fetcher) Target(upstream string) (string, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", fmt.Errorf("upstream url %q: %w", upstream, err)
	}
	if u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("upstream url %q: not an http(s) url with a host", upstream)
	}
	if !validHost(u.Hostname()) {
		return "", fmt.Errorf("upstream url %q: bad host", upstream)
	}
	for seg := range strings.SplitSeq(u.Path, "/") {
		if seg == ".." || seg == "." {
			return "", fmt.Errorf("upstream url %q: dot segments in the path", upstream)
		}
	}
	if f.Mirror == "" {
		if u.Scheme != "https" {
			return "", fmt.Errorf("upstream url %q: refusing plain http without a mirror", upstream)
		}
		return u.String(), nil
	}
	t := f.Mirror + "/" + u.Host + u.EscapedPath()
	if u.RawQuery != "" {
		t += "?" + u.RawQuery
	}
	return t, nil
}

// Do sends a request for an upstream URL and returns the response of a 2xx
// answer; the caller closes its body. Any other status is an
// *StatusError carrying the start of the body.
func (f *Fetcher) Do(ctx context.Context, method, upstream string) (*http.Response, error) {
	t, err := f.Target(upstream)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, t, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", t, err)
	}
	req.Header.Set("User-Agent", f.UserAgent)
	resp, err := f.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", t, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return nil, &StatusError{URL: t, Status: resp.StatusCode, Message: upstreamMessage(body)}
	}
	return resp, nil
}

// Bytes fetches a metadata document, at most f.MetaMax bytes.
func (f *Fetcher) Bytes(ctx context.Context, upstream string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, MetaTimeout)
	defer cancel()
	resp, err := f.Do(ctx, http.MethodGet, upstream)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > f.MetaMax {
		return nil, fmt.Errorf("%s: %d bytes: %w", upstream, resp.ContentLength, ErrTooLarge)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.MetaMax+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", upstream, err)
	}
	if int64(len(body)) > f.MetaMax {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", upstream, f.MetaMax, ErrTooLarge)
	}
	return body, nil
}

// JSON fetches a JSON document into v.
func (f *Fetcher) JSON(ctx context.Context, upstream string, v any) error {
	body, err := f.Bytes(ctx, upstream)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s: %w", upstream, err)
	}
	return nil
}

// upstreamMessage extracts a readable reason from an error body: the
// message or error field of a JSON body ({ok:false,message} on Fill), else
// the first line of text.
func upstreamMessage(body []byte) string {
	var j struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil {
		if j.Message != "" {
			return j.Message
		}
		if j.Error != "" {
			return j.Error
		}
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(body), []byte("\n"))
	s := strings.ToValidUTF8(string(line), "")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// validHost reports whether h is a host name or IP address: it becomes a
// path segment on a mirror, so "." and ".." must not pass.
func validHost(h string) bool {
	if h == "" || h[0] == '.' || h[len(h)-1] == '.' {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == ':') {
			return false
		}
	}
	return true
}
