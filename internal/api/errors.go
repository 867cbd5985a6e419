package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/modcatalog"
	"github.com/kilnhq/kiln/internal/noderpc"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
	"github.com/kilnhq/kiln/internal/validate"
)

// Error codes of api.md §0 used by this package.
const (
	codeValidation         = "VALIDATION_ERROR"
	codeInvalidServerID    = "INVALID_SERVER_ID"
	codeInvalidToken       = "INVALID_TOKEN"
	codeServerNotFound     = "SERVER_NOT_FOUND"
	codeServerInstalling   = "SERVER_INSTALLING"
	codeServerOffline      = "SERVER_OFFLINE"
	codeEULANotAccepted    = "EULA_NOT_ACCEPTED"
	codeConflict           = "CONFLICT"
	codeNotFound           = "NOT_FOUND"
	codeFileNotFound       = "FILE_NOT_FOUND"
	codeNotADirectory      = "NOT_A_DIRECTORY"
	codeNotAFile           = "NOT_A_FILE"
	codeFileTooLarge       = "FILE_TOO_LARGE"
	codeQuotaExceeded      = "QUOTA_EXCEEDED"
	codeTeamLimit          = "TEAM_LIMIT_REACHED"
	codeNoCapacity         = "NO_CAPACITY"
	codeNodeUnavailable    = "NODE_UNAVAILABLE"
	codeDownloadNotFound   = "DOWNLOAD_NOT_FOUND"
	codeConfigNotFound     = "CONFIGURATION_NOT_FOUND"
	codeConfigInUse        = "CONFIGURATION_IN_USE"
	codeConfigBusy         = "CONFIGURATION_BUSY"
	codeSnapshotNotFound   = "SNAPSHOT_NOT_FOUND"
	codeSnapshotDamaged    = "SNAPSHOT_DAMAGED"
	codeUpstream           = "UPSTREAM_ERROR"
	codeCatalogNotConfig   = "CATALOG_NOT_CONFIGURED"
	codeNotPushed          = "NOT_PUSHED"
	codeRunNotFound        = "RUN_NOT_FOUND"
	codeIdempotencyReused  = "IDEMPOTENCY_KEY_REUSED"
	codeUnsupportedArchive = "UNSUPPORTED_ARCHIVE"
	codeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	codePayloadTooLarge    = "PAYLOAD_TOO_LARGE"
	codeUnsupportedMedia   = "UNSUPPORTED_MEDIA_TYPE"
	codeRateLimited        = "RATE_LIMITED"
	codeRequestTimeout     = "REQUEST_TIMEOUT"
	codeStreamLimit        = "STREAM_LIMIT_REACHED"
	codeUnavailable        = "UNAVAILABLE"
	codeInternal           = "INTERNAL"
)

// errorBody is every error response (seed ErrorResponse).
type errorBody struct {
	Error  string           `json:"error"`
	Code   string           `json:"code"`
	Issues []validate.Issue `json:"issues,omitempty"`
	// Details are NO_CAPACITY's: why each node cannot take the server
	// (present, maybe empty, on that code only).
	Details []refusalJSON `json:"details,omitzero"`
}

// refusalJSON is why one node cannot take a new server.
type refusalJSON struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// httpError is an error that already knows its answer: errors the HTTP layer
// itself finds (a bad header, an unknown route, a malformed body).
type httpError struct {
	status int
	code   string
	msg    string
	issues []validate.Issue
}

func (e *httpError) Error() string { return e.msg }

func newHTTPError(status int, code, msg string) *httpError {
	return &httpError{status: status, code: code, msg: msg}
}

// apiError is the one table from errors to status and body.
func apiError(err error) (int, errorBody) {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he.status, errorBody{Error: he.msg, Code: he.code, Issues: he.issues}
	}
	if ve, ok := errors.AsType[*validate.Error](err); ok {
		return http.StatusBadRequest, errorBody{Error: ve.Error(), Code: codeValidation, Issues: ve.Issues}
	}
	if errors.Is(err, errSlowBody) {
		return http.StatusRequestTimeout, errorBody{Error: "the request body arrived too slowly; nothing was changed", Code: codeRequestTimeout}
	}
	if _, ok := errors.AsType[*bodyError](err); ok {
		return http.StatusBadRequest, errorBody{Error: "the request body could not be read: it ended early or is malformed", Code: codeValidation}
	}
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		_ = mbe
		return http.StatusRequestEntityTooLarge, errorBody{Error: "request body is too large", Code: codePayloadTooLarge}
	}
	if ue, ok := errors.AsType[*nodes.UnavailableError](err); ok {
		// The node's name and a sentence; the transport's error is the log's.
		return http.StatusServiceUnavailable, errorBody{Error: fmt.Sprintf("node %q is unavailable: %s", ue.Node, ue.Reason), Code: codeNodeUnavailable}
	}
	if errors.Is(err, noderpc.ErrRecovering) {
		return http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: codeNodeUnavailable}
	}
	if errors.Is(err, noderpc.ErrNotHere) {
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	}
	if oe, ok := errors.AsType[*servers.OtherNodeError](err); ok {
		return http.StatusConflict, errorBody{Error: oe.Error(), Code: codeConflict}
	}
	if te, ok := errors.AsType[*snapshot.TakingError](err); ok {
		return http.StatusConflict, errorBody{Error: te.Error(), Code: codeConflict}
	}
	if de, ok := errors.AsType[*snapshot.DamagedError](err); ok {
		// Its own sentence, never the wrapped detail (chunk keys).
		return http.StatusConflict, errorBody{Error: de.Error(), Code: codeSnapshotDamaged}
	}
	if pe, ok := errors.AsType[*servers.PortTakenError](err); ok {
		return http.StatusConflict, errorBody{Error: pe.Error(), Code: codeConflict}
	}
	if ne, ok := errors.AsType[*nodes.NoCapacityError](err); ok {
		d := make([]refusalJSON, len(ne.Refusals))
		for i, r := range ne.Refusals {
			d[i] = refusalJSON{Node: r.Node, Reason: r.Reason}
		}
		return http.StatusConflict, errorBody{Error: ne.Error(), Code: codeNoCapacity, Details: d}
	}
	if ue, ok := errors.AsType[*nodes.UnknownNodeError](err); ok {
		return apiError(validationf("node", "%s", ue.Error()))
	}
	switch {
	case errors.Is(err, auth.ErrInvalidToken):
		return http.StatusUnauthorized, errorBody{Error: "missing, malformed, unknown or revoked bearer token", Code: codeInvalidToken}
	case errors.Is(err, servers.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "server not found", Code: codeServerNotFound}
	case errors.Is(err, servers.ErrInstalling):
		return http.StatusConflict, errorBody{Error: "the server is being installed; try again when it is offline", Code: codeServerInstalling}
	case errors.Is(err, servers.ErrSnapshotting):
		return http.StatusConflict, errorBody{Error: "a snapshot of the server is being taken; reinstall it once the snapshot is ready or failed", Code: codeConflict}
	case errors.Is(err, servers.ErrRestoring):
		return http.StatusConflict, errorBody{Error: "a snapshot is being restored into the server; try again when the restore is done (its console says when)", Code: codeConflict}
	case errors.Is(err, servers.ErrTooManyStreams):
		return http.StatusConflict, errorBody{Error: fmt.Sprintf("the server already has %d console streams, the most it allows; close one and try again", servers.MaxStreams), Code: codeStreamLimit}
	case errors.Is(err, servers.ErrOffline):
		return http.StatusBadGateway, errorBody{Error: "the server is not running", Code: codeServerOffline}
	case errors.Is(err, servers.ErrEULANotAccepted):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeEULANotAccepted}
	case errors.As(err, new(*servers.TeamLimitError)):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeTeamLimit}
	case errors.Is(err, servers.ErrOwned), errors.Is(err, servers.ErrInstallFailed):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	case errors.Is(err, archive.ErrUnsupported):
		msg := "not an archive of a supported format (zip, jar, tar, tar.gz, tgz, tar.zst, tar.xz, gz), or corrupt"
		if ee, ok := errors.AsType[*archive.EntryError](err); ok {
			msg = ee.Error() + "; nothing was extracted"
		}
		return http.StatusUnprocessableEntity, errorBody{Error: msg, Code: codeUnsupportedArchive}
	case errors.Is(err, files.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "file not found", Code: codeFileNotFound}
	case errors.Is(err, files.ErrNotDirectory):
		return http.StatusUnprocessableEntity, errorBody{Error: "not a directory", Code: codeNotADirectory}
	case errors.Is(err, files.ErrNotFile):
		return http.StatusUnprocessableEntity, errorBody{Error: "not a regular file", Code: codeNotAFile}
	case errors.Is(err, files.ErrSymlink):
		return http.StatusUnprocessableEntity, errorBody{Error: "is a symbolic link: its own mode cannot be changed, and Kiln never acts through it", Code: codeNotAFile}
	case errors.Is(err, files.ErrHardLink):
		return http.StatusUnprocessableEntity, errorBody{Error: "the file has other hard links (perhaps outside the server's root): Kiln does not read or change it", Code: codeNotAFile}
	case errors.Is(err, files.ErrExists):
		return http.StatusConflict, errorBody{Error: "the destination already exists", Code: codeConflict}
	case errors.Is(err, files.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("the file is larger than %d bytes; download it instead", files.MaxContents), Code: codeFileTooLarge}
	case errors.Is(err, files.ErrQuota):
		return http.StatusInsufficientStorage, errorBody{Error: "the server's disk limit would be exceeded; nothing was written", Code: codeQuotaExceeded}
	case quota.IsDiskFull(err):
		return http.StatusInsufficientStorage, errorBody{Error: "the host's disk is full; nothing was written (tell the operator)", Code: codeQuotaExceeded}
	case errors.Is(err, pull.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "download not found", Code: codeDownloadNotFound}
	case errors.Is(err, pull.ErrTooMany):
		return http.StatusConflict, errorBody{Error: err.Error() + "; wait for one to finish or cancel one", Code: codeConflict}
	case errors.Is(err, pull.ErrClosed):
		return http.StatusServiceUnavailable, errorBody{Error: "remote downloads are unavailable while kiln stops; try again", Code: codeUnavailable}
	case errors.Is(err, secrets.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "secret not found", Code: codeNotFound}
	case errors.Is(err, secrets.ErrTooMany):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	case errors.Is(err, deploy.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "configuration not found", Code: codeConfigNotFound}
	case errors.Is(err, deploy.ErrVersionNotFound):
		return http.StatusNotFound, errorBody{Error: "the configuration has no version of that number", Code: codeNotFound}
	case errors.Is(err, deploy.ErrNameTaken):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	case errors.Is(err, deploy.ErrNotPushed):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeNotPushed}
	case errors.Is(err, deploy.ErrInUse):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConfigInUse}
	case errors.Is(err, deploy.ErrBusy):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConfigBusy}
	case errors.Is(err, modcatalog.ErrNotConfigured):
		return http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: codeCatalogNotConfig}
	case errors.Is(err, modcatalog.ErrUpstream):
		return http.StatusBadGateway, errorBody{Error: err.Error(), Code: codeUpstream}
	case errors.Is(err, modcatalog.ErrModpackNotFound):
		return http.StatusNotFound, errorBody{Error: err.Error(), Code: codeNotFound}
	case errors.Is(err, modcatalog.ErrModpackBusy):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	case errors.Is(err, modcatalog.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: err.Error(), Code: codeNotFound}
	case errors.Is(err, modcatalog.ErrClosed):
		return http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: codeUnavailable}
	case errors.Is(err, snapshot.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "snapshot not found", Code: codeSnapshotNotFound}
	case errors.Is(err, snapshot.ErrRestoreNotFound):
		return http.StatusNotFound, errorBody{Error: "restore not found", Code: codeNotFound}
	case errors.Is(err, snapshot.ErrStopping):
		return http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: codeUnavailable}
	case errors.Is(err, snapshot.ErrExportsBusy):
		return http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: codeUnavailable}
	case errors.Is(err, snapshot.ErrNotReady), errors.Is(err, snapshot.ErrBusy):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: codeConflict}
	case errors.Is(err, restore.ErrPending):
		return http.StatusConflict, errorBody{Error: "an interrupted restore of this server is still being finished; try again in a moment", Code: codeConflict}
	case errors.Is(err, runs.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: "run not found", Code: codeRunNotFound}
	case errors.Is(err, runs.ErrConfigurationNotFound):
		return http.StatusNotFound, errorBody{Error: "configuration not found", Code: codeConfigNotFound}
	case errors.Is(err, runs.ErrIdempotencyKeyReused):
		return http.StatusConflict, errorBody{Error: "the idempotency key was already used in the last 24 hours to apply another configuration; use a new key", Code: codeIdempotencyReused}
	case errors.Is(err, runs.ErrFinished):
		return http.StatusConflict, errorBody{Error: "the run has already finished; there is nothing to cancel", Code: codeConflict}
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, errorBody{Error: "the request took too long", Code: codeUnavailable}
	}
	return http.StatusInternalServerError, errorBody{Error: "internal error; the request id identifies it in the server log", Code: codeInternal}
}

func validationf(path, format string, args ...any) error {
	return validate.Errorf(path, format, args...)
}

// refused reports whether err, though the contract answers it with a 5xx
// status, is the client's doing or an expected state rather than a failure
// of Kiln, so it is logged at info, never at ERROR: a command sent to a
// server that is not running (502 SERVER_OFFLINE), a write past the
// server's own disk limit (507 QUOTA_EXCEEDED), a remote download asked for
// while kiln stops (503 UNAVAILABLE). The host's disk being full (also
// 507) stays an ERROR: the operator must act.
func refused(err error) bool {
	if quota.IsDiskFull(err) {
		return false
	}
	return errors.Is(err, servers.ErrOffline) || errors.Is(err, files.ErrQuota) || errors.Is(err, pull.ErrClosed)
}
