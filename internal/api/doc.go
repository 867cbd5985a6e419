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
//   - Long requests have limits (deadlines.go), set through
//     http.ResponseController on the connection rather than as
//     http.Server timeouts, which cannot tell a 100 MiB upload from a
//     stalled one. Bodies are read, and answers written, in steps of
//     1 MiB; each step must move within TransferIdle (30 s) plus its time
//     at MinTransferRate (64 KiB/s), counted from its start (a single
//     write larger than a step gets the time for its size). A client that
//     stops reading a download or sending a body is cut off within about
//     46 s whatever the size, one that trickles below ~22 KiB/s soon
//     after; the handler's write or read fails, it returns, and its files
//     are closed. A body that times out is 408 REQUEST_TIMEOUT (a code
//     added to api.md §0's, documented on every operation with a body);
//     another failure to read it (the client went away mid-body) is 400.
//     The time a handler works before its first write does not count: the
//     first write starts the first step. The read deadline is cleared at
//     the end of the body, because net/http then reads the connection in
//     the background to notice a client going away, and a deadline passing
//     there would cancel the request's context while the handler works.
//     Every request also sets its write deadline at its start, since
//     net/http keeps the last one of a keep-alive connection.
//   - A console stream sets its write deadline per event, checks its
//     token and its server again at every heartbeat (15 s: a token revoked
//     by kiln admin, another process, or a server deleted through another
//     replica, is seen only in the database), ends at the latest after
//     StreamMaxLife (24 h; the client reconnects, EventSource does so by
//     itself), with a comment saying why. A deletion through this process
//     ends it at once. A server has at most servers.MaxStreams (32)
//     streams; the next is 409 STREAM_LIMIT_REACHED, a new code: a state
//     of the server (its streams), not a rate, so not 429 with a
//     Retry-After nobody could compute.
//   - Runs (runs.go): with Deps.Runs nil (kiln serve before its executor
//     runs) apply, the run list, detail and cancel answer 503 UNAVAILABLE,
//     so nothing queues runs that nothing executes. Apply is
//     deploy.Service.Apply: a live idempotency key's run is answered
//     before anything else, so a replay pushes nothing; else the push of
//     the current YAML (the latest version unchanged when the spec_hash is
//     the same) and the run are one transaction, whose key insert is what
//     makes concurrent applies with one key one run; a failure leaves
//     neither (500 INTERNAL, nothing pushed). summary and checkpoint are objects in the seed, never
//     null: zeros until the run finishes, no key done and plan_hash null
//     before it is planned. The per-kind counts read the pushed version's
//     top-level mappings, not spec.Parse against today's catalog. Deleting
//     a configuration with an open run is 409 CONFIGURATION_BUSY (its runs
//     would go with it), decided in the delete's transaction
//     (deploy.ErrBusy).
//   - Plan (plan.go, POST /deployments/configurations/{id}/plan): the
//     executor's own planning (Deps.Planner, *executor.Executor), so a
//     preview is what a run of the same YAML executes; nil (no executor)
//     answers 503 UNAVAILABLE as the run routes do. The body is optional
//     ({yaml} for an unsaved edit, refused with PATCH's issues when
//     broken). A run the executor would refuse at planning is answered
//     200 with error and failure_class as the run would carry them, and
//     the steps planned; each step says its tier (null for a noop) and
//     changes (the fields that differ, [] but for update and replace).
//   - Secrets (secrets.go, GET /secrets, PUT and DELETE /secrets/{name}):
//     names and times only, never a value (internal/secrets keeps them
//     sealed; only the executor reads them); PUT creates or replaces
//     (200 with created), a team past its 200 is 409 CONFLICT, a name
//     nobody has (or another team's) 404 NOT_FOUND, as api.md §0 names
//     the generic code. A validation message never quotes a value, and
//     the body is never logged (no request body is).
//   - Placement (POST /servers, optional node): a server no node takes is
//     409 NO_CAPACITY, whose body adds details, one {node, reason} a node
//     (nodes.NoCapacityError's refusals, in name order; present, maybe
//     empty, on that code only) — what api.md §10 asks, "a sentence per
//     node", kept apart from the sentence so a client reads it without
//     parsing; error joins them as "node NAME: reason". A node asked that
//     does not exist is a validation issue at node (400), as a field of
//     the body naming nothing is; "" is refused there too, absent or null
//     lets placement choose.
//
// It must never contain domain logic or SQL, and never log a token, a
// request body or an Authorization header.
package api
