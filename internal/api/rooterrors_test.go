package api

import (
	"fmt"
	"testing"

	"github.com/kilnhq/kiln/internal/serverroot"
)

// TestRootErrorsAnswer: the errors of a server's root, as the node-local
// packages return them (serverroot's, wrapped, never servers' names),
// get the answers of api.md §0.
func TestRootErrorsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		body   errorBody
	}{
		{"not found", serverroot.ErrNotFound, 404, errorBody{Error: "server not found", Code: "SERVER_NOT_FOUND"}},
		{"installing", serverroot.ErrInstalling, 409, errorBody{Error: "the server is being installed; try again when it is offline", Code: "SERVER_INSTALLING"}},
		{"restoring", serverroot.ErrRestoring, 409, errorBody{Error: "a snapshot is being restored into the server; try again when the restore is done (its console says when)", Code: "CONFLICT"}},
		{"snapshotting", serverroot.ErrSnapshotting, 409, errorBody{Error: "a snapshot of the server is being taken; reinstall it once the snapshot is ready or failed", Code: "CONFLICT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("write file: %w", tc.err)
			st, body := apiError(err)
			if st != tc.status {
				t.Errorf("apiError(%v) status = %d, want %d", err, st, tc.status)
			}
			if body.Error != tc.body.Error || body.Code != tc.body.Code || body.Issues != nil {
				t.Errorf("apiError(%v) body = %+v, want %+v", err, body, tc.body)
			}
		})
	}
}
