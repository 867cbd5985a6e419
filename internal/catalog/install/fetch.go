package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Limits of what an upstream may send.
const (
	defaultMetaMax     = 16 << 20  // one metadata (JSON, sidecar) response
	defaultArtifactMax = 512 << 20 // one jar
	metaTimeout        = 30 * time.Second
	downloadTimeout    = 15 * time.Minute
)

// fetcher makes every request to an upstream: it applies the mirror, sets
// the User-Agent, refuses non-2xx answers and caps response sizes.
type fetcher struct {
	client  *http.Client
	ua      string
	mirror  string // "" or the mirror base URL without a trailing slash
	metaMax int64
}

// target returns the URL to request for an upstream URL. Without a mirror
// it is the URL itself, which must be https. With a mirror the scheme is
// dropped and the host becomes the first path segment under the mirror:
// https://fill.papermc.io/v3/projects/paper → <mirror>/fill.papermc.io/v3/projects/paper
// (the query is kept). URLs found inside upstream answers go through the
// same function, so one mirror serves every upstream.
func (f *fetcher) target(upstream string) (string, error) {
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
	if f.mirror == "" {
		if u.Scheme != "https" {
			return "", fmt.Errorf("upstream url %q: refusing plain http without a mirror", upstream)
		}
		return u.String(), nil
	}
	t := f.mirror + "/" + u.Host + u.EscapedPath()
	if u.RawQuery != "" {
		t += "?" + u.RawQuery
	}
	return t, nil
}

// do sends a request for an upstream URL and returns the response of a 2xx
// answer; the caller closes its body. Any other status is an
// *UpstreamError carrying the start of the body.
func (f *fetcher) do(ctx context.Context, method, upstream string) (*http.Response, error) {
	t, err := f.target(upstream)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, t, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", t, err)
	}
	req.Header.Set("User-Agent", f.ua)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", t, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return nil, &UpstreamError{URL: t, Status: resp.StatusCode, Message: upstreamMessage(body)}
	}
	return resp, nil
}

// bytes fetches a metadata document, at most f.metaMax bytes.
func (f *fetcher) bytes(ctx context.Context, upstream string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	resp, err := f.do(ctx, http.MethodGet, upstream)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > f.metaMax {
		return nil, fmt.Errorf("%s: %d bytes: %w", upstream, resp.ContentLength, ErrTooLarge)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.metaMax+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", upstream, err)
	}
	if int64(len(body)) > f.metaMax {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", upstream, f.metaMax, ErrTooLarge)
	}
	return body, nil
}

// json fetches a JSON document into v.
func (f *fetcher) json(ctx context.Context, upstream string, v any) error {
	body, err := f.bytes(ctx, upstream)
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
