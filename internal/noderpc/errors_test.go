package noderpc

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/serverroot"
	"github.com/kilnhq/kiln/internal/validate"
)

// TestErrorsCrossTheWire: what a node answers becomes, on the control
// plane, the very error errors.Is and errors.As know (so internal/api
// answers a remote server's refusal as a local one's), with its sentence;
// any other error is a plain one.
func TestErrorsCrossTheWire(t *testing.T) {
	cross := func(err error) (int, error) {
		rec := httptest.NewRecorder()
		writeError(rec, err)
		return rec.Code, readError(rec.Result())
	}
	for _, c := range []struct {
		err    error
		status int
	}{
		{serverroot.ErrNotFound, 404},
		{fmt.Errorf("power: %w", serverroot.ErrInstalling), 409},
		{serverroot.ErrRestoring, 409},
		{serverroot.ErrSnapshotting, 409},
		{fmt.Errorf("%w: write |0: broken pipe", gameserver.ErrOffline), 409},
		{fmt.Errorf("%w: checksum mismatch", gameserver.ErrInstallFailed), 409},
		{gameserver.ErrTooManyStreams, 409},
	} {
		status, got := cross(c.err)
		var sentinel error
		for _, k := range codes {
			if errors.Is(c.err, k.err) {
				sentinel = k.err
			}
		}
		if status != c.status || !errors.Is(got, sentinel) || got.Error() != c.err.Error() {
			t.Errorf("%v crossed as %d %v; want %d, errors.Is %v, the same sentence", c.err, status, got, c.status, sentinel)
		}
	}
	status, got := cross(&gameserver.EULAError{Software: "paper"})
	if ee, ok := errors.AsType[*gameserver.EULAError](got); status != 409 || !ok || ee.Software != "paper" || !errors.Is(got, gameserver.ErrEULANotAccepted) {
		t.Errorf("an EULA refusal crossed as %d %#v", status, got)
	}
	issues := []validate.Issue{{Path: "action", Message: "must be one of start, stop, restart, kill"}}
	status, got = cross(&validate.Error{Issues: issues})
	if ve, ok := errors.AsType[*validate.Error](got); status != 400 || !ok || !reflect.DeepEqual(ve.Issues, issues) {
		t.Errorf("a validation error crossed as %d %#v", status, got)
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, 503, errorBody{Error: "the node is still recovering its game servers", Code: CodeRecovering})
	if got := readError(rec.Result()); !errors.Is(got, ErrRecovering) {
		t.Errorf("a recovering agent's answer read as %v", got)
	}
	status, got = cross(errors.New("open /srv/kiln/servers/x: no space left on device"))
	for _, k := range codes {
		if errors.Is(got, k.err) {
			t.Errorf("a plain error crossed as %v", k.err)
		}
	}
	if status != 500 || got.Error() != "open /srv/kiln/servers/x: no space left on device" {
		t.Errorf("a plain error crossed as %d %v", status, got)
	}
}
