package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are the packages (and their subpackages) an agent must not
// link: the database layer and its drivers, and the box of the control
// plane's secret key. A game host runs code from the internet; what it
// does not have, it cannot give away.
var forbidden = []string{
	"database/sql",
	"github.com/kilnhq/kiln/internal/store",
	"github.com/kilnhq/kiln/internal/secretbox",
	"github.com/jackc/pgx",
	"modernc.org/sqlite",
	"github.com/pressly/goose",
	"github.com/go-sql-driver/mysql",
}

// allowed are packages below forbidden ones that hold no database code:
// database/sql/driver is the interfaces a value implements to be stored
// or scanned (github.com/google/uuid's UUID, which the blob store's S3
// client links, implements driver.Valuer); it opens nothing and talks to
// nothing. database/sql itself, which connects, stays forbidden.
var allowed = map[string]bool{"database/sql/driver": true}

// deps lists the packages pkg imports, directly or not (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func imported(list []string) []string {
	var bad []string
	for _, p := range list {
		if allowed[p] {
			continue
		}
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, f+"/") {
				bad = append(bad, p)
			}
		}
	}
	return bad
}

// TestAgentImportsNoDatabase: the packages kiln agent runs (this one,
// its entry, and everything it imports) import no database code. kiln
// serve's packages do, which shows the check sees them.
func TestAgentImportsNoDatabase(t *testing.T) {
	if bad := imported(deps(t, "github.com/kilnhq/kiln/internal/agent")); len(bad) > 0 {
		t.Errorf("the agent imports %v", bad)
	}
	if bad := imported(deps(t, "github.com/kilnhq/kiln/internal/nodes")); len(bad) == 0 {
		t.Errorf("the control plane's internal/nodes imports none of %v: the check sees nothing", forbidden)
	}
}
