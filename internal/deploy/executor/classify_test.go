package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/runtime"
)

// TestClassifyKeepsDetailsFromTeams: an error the executor does not know
// reaches the run's error (which the team reads) as a sentence, never as
// its text, which may name a host path or a driver's message; a runtime's
// error gives its own sentence. Both keep the error for the log.
func TestClassifyKeepsDetailsFromTeams(t *testing.T) {
	hostPath := "/var/lib/kiln/servers/6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c/server.properties"
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown", fmt.Errorf("write config: %w", &fs.PathError{Op: "open", Path: hostPath, Err: errors.New("permission denied")}),
			"Kiln failed to do this step (an internal error; the operator's log has the detail)"},
		{"runtime", fmt.Errorf("start: %w", &runtime.Error{Reason: "the container engine is unavailable", Err: errors.New("dial unix /var/run/docker.sock: connect: no such file")}),
			"the container engine is unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			se := classify(c.err)
			if se.msg != c.want || se.class != runs.FailInternal || !errors.Is(se.detail, c.err) {
				t.Errorf("classify(%v) = %q (%s, detail %v), want %q with the error as detail", c.err, se.msg, se.class, se.detail, c.want)
			}
			if strings.Contains(se.msg, "/var/") {
				t.Errorf("the team's sentence %q names a host path", se.msg)
			}
		})
	}
}

// TestClassifyUnavailableNode: a step whose server's node (an agent) is
// away is a transient dependency failure naming the node, never the
// transport's detail (an address), which the log keeps.
func TestClassifyUnavailableNode(t *testing.T) {
	err := fmt.Errorf("power: %w", &nodes.UnavailableError{Node: "edge", Reason: "it has no connection to this kiln serve",
		Err: errors.New("dial tcp 10.1.2.3:7443: connection refused")})
	se := classify(err)
	want := `node "edge" is unavailable: it has no connection to this kiln serve`
	if se.class != runs.FailDependency || !se.transient || se.msg != want || !errors.Is(se.detail, err) {
		t.Errorf("classify(%v) = %q (%s, transient %v); want %q, dependency, transient, the error as detail", err, se.msg, se.class, se.transient, want)
	}
}
