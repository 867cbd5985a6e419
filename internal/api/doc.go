// Package api translates HTTP to calls into the domain packages and typed
// errors back to the error model of api.md §0. It owns routing, middleware
// (request id, panic recovery, access log, metrics, authentication, rate
// limits), strict JSON decoding and the OpenAPI document.
//
// Decisions:
//   - Routing is the standard library's http.ServeMux with method patterns;
//     every route is one row of the table in routes.go, which also carries its
//     OpenAPI operation id and its rate-limit class. 404 and 405 (with Allow)
//     are answered as JSON errors by one fallback handler.
//   - The OpenAPI 3.1 document is written by hand (openapi.yaml, embedded and
//     served as JSON) rather than generated with huma: the seed fixes the
//     shapes field by field, and a hand-written document states them exactly
//     (nullability, maxItems, error bodies) while the handlers stay plain
//     net/http with no framework between a request and the domain call. Code
//     and document cannot drift because the test suite (openapi_test.go)
//     checks that every route of the table is an operation of the document
//     and back, drives every route, and validates every real response it
//     gets against the document with pb33f/libopenapi-validator; a second
//     test compares the document with the seed's and validates the seed's
//     operations' responses against the seed document too.
//   - Errors: handlers return errors; writeError holds the only table from
//     domain errors to status + code. Anything unknown is 500 INTERNAL with a
//     generic body; the detail is logged once, with the request id.
//   - Log levels follow blame, not status: every answer's access log line
//     (INFO) carries its error code; ERROR is for failures of Kiln's own.
//     A 4xx answer never logs at ERROR, nor do the 5xx answers the
//     contract gives to a client's doing or an expected state (refused in
//     errors.go: a command to a stopped server, 502 SERVER_OFFLINE; a write
//     past the server's disk limit, 507; a pull while kiln stops, 503),
//     which add an INFO "request refused" line with the detail. The host's
//     disk being full (507 too) is an ERROR: the operator must act.
//   - JSON bodies are decoded strictly: Content-Type must be JSON (415), the
//     body is capped (413), unknown fields are refused naming their path,
//     and type errors name the field (400 VALIDATION_ERROR with issues).
//   - No request can take the process down. A handler's own panic is
//     recovered by the middleware (500 INTERNAL, logged with its stack);
//     a goroutine a request starts (the contents stream's reader, List's
//     stat workers) runs its work through panics.Catch and hands the
//     *panics.Error to the request, which answers it (or aborts an answer
//     already started) and logs the stack once in writeError. A panic in
//     a goroutine nobody recovers ends the process: net/http only
//     recovers the handler's own goroutine.
//   - Answers are bounded. GET /files/list pages (limit 1-10,000, default
//     10,000, and an opaque cursor; next_cursor is always present, "" on
//     the last page): a client that never sends a limit gets the same
//     answer as before for a directory of up to 10,000 entries, and the
//     rest on later pages instead of a multi-megabyte answer. GET
//     /files/search takes limit (1-1000, default 1000) and says truncated.
//     Integer query values out of range, not integers or given twice are
//     400 VALIDATION_ERROR naming the parameter (intQuery).
//   - Metrics are labelled by the route pattern of the table (fixed when
//     the route is registered), "unmatched" for every request no route
//     matched, never by the path; metrics.ObserveRequest records
//     non-standard methods as OTHER. A client cannot add a series.
//
// It must never contain domain logic or SQL, and never log a token, a
// request body or an Authorization header.
package api
