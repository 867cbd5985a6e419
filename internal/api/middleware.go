package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/ratelimit"
)

type ctxKey struct{}

// reqState travels in the request context.
type reqState struct {
	id        string
	principal auth.Principal
	code      string // the error answer's code, for the access log
}

func state(ctx context.Context) *reqState {
	st, _ := ctx.Value(ctxKey{}).(*reqState)
	return st
}

// principal is who the authenticated request acts as.
func principal(r *http.Request) auth.Principal { return state(r.Context()).principal }

// RequestID returns the request id carried by ctx, or "".
func RequestID(ctx context.Context) string {
	if st := state(ctx); st != nil {
		return st.id
	}
	return ""
}

// WithRequestID wraps a slog handler so every record logged with a request's
// context carries its request_id.
func WithRequestID(h slog.Handler) slog.Handler { return requestIDHandler{h} }

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// validRequestID accepts 1-128 characters of [A-Za-z0-9._:-].
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// statusWriter remembers the status and size of an answer, and keeps its
// connection's write deadline (deadlines.go).
type statusWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController // of the writer below
	lim     transferLimits
	status  int
	bytes   int64
	stepEnd int64 // bytes the current write deadline covers
	armed   bool  // a write deadline was set for this answer
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.armWrite(0)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.armWrite(int64(len(b)))
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines (SSE).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom hands a body read from src (a file's download: io.Copy from
// an *os.File) to the writer below's ReadFrom, which is how net/http
// sends a file with sendfile(2) — no copy through Kiln's memory — instead
// of a read and a write of every 32 KiB. It goes one transfer step at a
// time (an io.LimitedReader of the file, which sendfile still takes), so
// the write deadline keeps following the bytes as Write's does.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{w}, src)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var total int64
	for {
		w.armWrite(transferStep)
		n, err := rf.ReadFrom(io.LimitReader(src, transferStep))
		total += n
		w.bytes += n
		if err != nil || n < transferStep {
			return total, err
		}
	}
}

// writerOnly hides a writer's ReadFrom from io.Copy (which would call it
// again).
type writerOnly struct{ io.Writer }

// wrap builds the middleware chain of one route once, at registration:
// request id → recovery → access log and metrics → token → rate limits →
// handler → error writer.
func (s *Server) wrap(rt route) http.Handler {
	label := rt.method + " " + rt.path
	if rt.method == "" {
		label = rt.path
	}
	rules := s.rules(rt.limit)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		st := &reqState{id: r.Header.Get("X-Request-Id")}
		if !validRequestID(st.id) {
			st.id = ids.RandomBase62(20)
		}
		ctx := context.WithValue(r.Context(), ctxKey{}, st)
		r = r.WithContext(ctx)
		rc := http.NewResponseController(rw)
		w := &statusWriter{ResponseWriter: rw, rc: rc, lim: s.transfer}
		w.Header().Set("X-Request-Id", st.id)
		// A write deadline left by the previous request on this connection
		// must not cut this one's interim writes (100 Continue); the first
		// write of the answer sets its own (not counting the time the
		// handler works before it).
		_ = rc.SetWriteDeadline(start.Add(s.transfer.timeFor(transferStep)))
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, lim: s.transfer}
		}

		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(p), "route", label, "stack", string(debug.Stack()))
				if w.status == 0 {
					s.writeError(w, r, fmt.Errorf("panic: %v", p))
				}
			}
			d := time.Since(start)
			if w.status == 0 { // net/http writes the header now
				w.armWrite(0)
				w.status = http.StatusOK
			}
			s.deps.Metrics.ObserveRequest(label, r.Method, w.status, d)
			attrs := []slog.Attr{
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", label),
				slog.Int("status", w.status), slog.Int64("bytes", w.bytes),
				slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			}
			if st.code != "" {
				attrs = append(attrs, slog.String("code", st.code))
			}
			if st.principal.TeamID != "" {
				attrs = append(attrs, slog.String("team_id", st.principal.TeamID), slog.String("token_id", st.principal.TokenID))
			}
			s.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
		}()

		if !rt.public {
			client := clientAddr(r)
			if s.failed.Spent(client, unauthRule()) {
				w.Header().Set("Retry-After", "60")
				s.writeError(w, r, newHTTPError(http.StatusTooManyRequests, codeRateLimited,
					fmt.Sprintf("more than %d requests a minute from this address had a missing or invalid token; retry in a minute", unauthFailures)))
				return
			}
			p, err := s.authenticate(r)
			if err != nil {
				if errors.Is(err, auth.ErrInvalidToken) {
					_, _ = s.failed.Allow(r.Context(), client, unauthRule())
				}
				s.writeError(w, r, err)
				return
			}
			st.principal = p
			if err := s.limit(w, r, p, rules); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if err := rt.h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// clientAddr is the request's client address (its IP, without the port).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	token, ok := bearerToken(r)
	if !ok {
		return auth.Principal{}, auth.ErrInvalidToken
	}
	return s.deps.Auth.Authenticate(r.Context(), token)
}

// bearerToken is the token of the request's Authorization header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// writeError answers err through the one table. The access log line
// carries the answer's code; failures of Kiln's own are logged here too,
// once, at ERROR with the request id. A client's mistake is never an
// ERROR, whatever status the contract gives it (refused).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := apiError(err)
	if st := state(r.Context()); st != nil {
		st.code = body.Code
	}
	switch {
	case status < 500:
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		s.log.InfoContext(r.Context(), "client went away", "err", err)
	case refused(err):
		s.log.InfoContext(r.Context(), "request refused", "code", body.Code, "err", err)
	default:
		if pe, ok := errors.AsType[*panics.Error](err); ok { // from a goroutine of the request
			s.log.ErrorContext(r.Context(), "request failed", "err", err, "stack", string(pe.Stack))
		} else {
			s.log.ErrorContext(r.Context(), "request failed", "err", err)
		}
	}
	writeJSON(w, status, body)
}

// limitClass names the tighter per-route limits of api.md §1.4.
type limitClass string

const (
	limitNone             limitClass = ""
	limitFilesSearch      limitClass = "files.search"
	limitFilesWrite       limitClass = "files.write"
	limitFilesDelete      limitClass = "files.delete"
	limitFilesPull        limitClass = "files.pull"
	limitCompress         limitClass = "files.compress"
	limitDecompress       limitClass = "files.decompress"
	limitSnapshotCreate   limitClass = "snapshots.create"
	limitSnapshotDownload limitClass = "snapshots.download"
)

// classPerHundred is each class's limit when the global one is 100/min.
func classPerHundred(c limitClass) int {
	switch c {
	case limitFilesSearch, limitFilesDelete:
		return 30
	case limitFilesWrite:
		return 60
	case limitCompress, limitDecompress:
		return 20
	case limitFilesPull, limitSnapshotCreate, limitSnapshotDownload:
		return 10
	}
	return 0
}

type namedRule struct {
	name string
	rule ratelimit.Rule
}

// rules are the limits a route's requests count against: the route's
// class scaled by --rate-limit/100 (at least 1), then the global one.
func (s *Server) rules(c limitClass) []namedRule {
	var out []namedRule
	if n := classPerHundred(c); n > 0 {
		scaled := max(1, int(int64(n)*int64(s.cfg.RateLimit)/100))
		out = append(out, namedRule{string(c), ratelimit.Rule{Limit: scaled, Period: time.Minute}})
	}
	return append(out, namedRule{"global", ratelimit.Rule{Limit: s.cfg.RateLimit, Period: time.Minute}})
}

// limit counts the request against every rule and sets the RateLimit-*
// headers from the tightest one; a refusal is 429 with Retry-After. A
// request one rule refuses spends nothing of the others: the rules it
// passed before are given back (Undo), and those after are not asked.
func (s *Server) limit(w http.ResponseWriter, r *http.Request, p auth.Principal, rules []namedRule) error {
	var shown ratelimit.Result
	for i, nr := range rules {
		res, err := s.deps.Limiter.Allow(r.Context(), p.TokenID+":"+nr.name, nr.rule)
		if err != nil {
			return err
		}
		if i == 0 || !res.Allowed || (shown.Allowed && res.Remaining < shown.Remaining) {
			shown = res
		}
		if !res.Allowed {
			for _, back := range rules[:i] {
				if err := s.deps.Limiter.Undo(r.Context(), p.TokenID+":"+back.name, back.rule); err != nil {
					s.log.WarnContext(r.Context(), "give back a refused request's rate limit", "err", err)
				}
			}
			break
		}
	}
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(shown.Limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(shown.Remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(ceilSeconds(shown.Reset)))
	if !shown.Allowed {
		retry := max(1, ceilSeconds(shown.RetryAfter))
		h.Set("Retry-After", strconv.Itoa(retry))
		return newHTTPError(http.StatusTooManyRequests, codeRateLimited,
			fmt.Sprintf("rate limit of %d requests per minute exceeded; retry in %d s", shown.Limit, retry))
	}
	return nil
}

func ceilSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
