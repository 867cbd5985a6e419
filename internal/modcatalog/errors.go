package modcatalog

import (
	"errors"
	"fmt"
)

// Errors callers tell apart. Invalid query values and install requests
// are a *validate.Error naming the parameter or field; nothing upstream is
// called for them.
var (
	// ErrUpstream: a catalog failed, timed out or answered something that
	// is not its documented shape. The error is an *UpstreamError whose
	// message is a sentence for the user (map to 502 UPSTREAM_ERROR).
	ErrUpstream = errors.New("the mod catalog failed")
	// ErrNotConfigured: CurseForge is used but no API key is configured
	// (map to 503 CATALOG_NOT_CONFIGURED).
	ErrNotConfigured = errors.New("CurseForge is not configured: the operator has not set a CurseForge API key (--curseforge-api-key)")
	// ErrNotFound: the catalog has no such project, version or file
	// (map to 404 NOT_FOUND).
	ErrNotFound = errors.New("the mod catalog has no such project, version or file")
)

// UpstreamError is a failed call to a catalog. errors.Is(err, ErrUpstream)
// holds for it. Its message names the catalog and what went wrong, never
// the API key.
type UpstreamError struct {
	// Catalog is "CurseForge" or "Modrinth".
	Catalog string
	// Status is the last HTTP status received, 0 when none was (timeout,
	// connection error).
	Status int
	// Reason is the sentence's end: "answered HTTP 500 Internal Server
	// Error", "did not answer within 10s", …
	Reason string
	// Err is the underlying error, if any (logged, not shown).
	Err error

	timeout bool // no answer within Options.Timeout (metrics)
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("%s %s", e.Catalog, e.Reason)
}

// Is makes errors.Is(err, ErrUpstream) true.
func (e *UpstreamError) Is(target error) bool { return target == ErrUpstream }

// Unwrap returns the underlying error.
func (e *UpstreamError) Unwrap() error { return e.Err }
