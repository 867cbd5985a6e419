package noderpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/validate"
)

// ErrNotHere: an operation on a server's files asked of a node whose
// files are not on this machine (an agent's, asked of the control plane).
var ErrNotHere = errors.New("the files of a server on an agent are not reachable from the control plane in this version")

// ErrRecovering: the agent has not recovered its game servers yet (it
// waits for the control plane to read their records): try again.
var ErrRecovering = errors.New("the node is still recovering its game servers; try again in a moment")

// CodeRecovering is ErrRecovering's code on the wire.
const CodeRecovering = "RECOVERING"

// errorBody is an error on the wire.
type errorBody struct {
	Error    string           `json:"error"`
	Code     string           `json:"code,omitempty"`
	Issues   []validate.Issue `json:"issues,omitempty"`
	Software string           `json:"software,omitempty"` // of an EULA refusal
}

// codes are the errors that cross the wire as themselves.
var codes = []struct {
	code string
	err  error
}{
	{"not_found", serverroot.ErrNotFound},
	{"installing", serverroot.ErrInstalling},
	{"restoring", serverroot.ErrRestoring},
	{"snapshotting", serverroot.ErrSnapshotting},
	{"offline", gameserver.ErrOffline},
	{"install_failed", gameserver.ErrInstallFailed},
	{"too_many_streams", gameserver.ErrTooManyStreams},
}

// writeError answers err: 404 for a server the node does not hold, 409
// for a refusal, 400 for bad input, 500 for anything else.
func writeError(w http.ResponseWriter, err error) {
	b := errorBody{Error: err.Error()}
	status := http.StatusInternalServerError
	if ve, ok := errors.AsType[*validate.Error](err); ok {
		b.Code, b.Issues, status = "validation", ve.Issues, http.StatusBadRequest
	} else if ee, ok := errors.AsType[*gameserver.EULAError](err); ok {
		b.Code, b.Software, status = "eula", ee.Software, http.StatusConflict
	} else {
		for _, c := range codes {
			if errors.Is(err, c.err) {
				b.Code, status = c.code, http.StatusConflict
				if c.err == serverroot.ErrNotFound {
					status = http.StatusNotFound
				}
				break
			}
		}
	}
	writeJSON(w, status, b)
}

// readError makes the error of an answer that is not 2xx again.
func readError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var b errorBody
	if json.Unmarshal(data, &b) != nil || b.Error == "" {
		return fmt.Errorf("the node answered %s", resp.Status)
	}
	switch b.Code {
	case CodeRecovering:
		return ErrRecovering
	case "validation":
		return &validate.Error{Issues: b.Issues}
	case "eula":
		return &gameserver.EULAError{Software: b.Software}
	}
	for _, c := range codes {
		if b.Code == c.code {
			return &remoteError{msg: b.Error, is: c.err}
		}
	}
	return errors.New(b.Error)
}

// remoteError is a sentinel error said by the other side: its text as
// said there, errors.Is matching the sentinel.
type remoteError struct {
	msg string
	is  error
}

func (e *remoteError) Error() string        { return e.msg }
func (e *remoteError) Is(target error) bool { return target == e.is }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request's body (at most 1 MiB) into v.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &validate.Error{Issues: []validate.Issue{{Path: "", Message: "the body is not the JSON expected: " + err.Error()}}}
	}
	return nil
}
