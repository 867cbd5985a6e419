package serverroot

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// nodeLocal are the packages that work on a node's own servers (their
// roots, files, snapshots' chunks, processes and network walls): kiln
// agent will run them on a game host.
var nodeLocal = []string{
	"internal/serverroot",
	"internal/gameserver",
	"internal/files",
	"internal/files/archive",
	"internal/snapshot/manifest",
	"internal/snapshot/engine",
	"internal/snapshot/restore",
	"internal/snapshot/ignore",
	"internal/quota",
	"internal/blob",
	"internal/runtime",
	"internal/runtime/docker",
	"internal/catalog/install",
	"internal/node",
	"internal/netguard",
	"internal/slp",
}

// forbidden are the packages (and their subpackages) a node-local package
// must not link: the database layer and its drivers, and the box of the
// control plane's secret key (internal/agent's test forbids the same).
var forbidden = []string{
	"database/sql",
	"github.com/kilnhq/kiln/internal/store",
	"github.com/kilnhq/kiln/internal/secretbox",
	"github.com/jackc/pgx",
	"modernc.org/sqlite",
	"github.com/pressly/goose",
	"github.com/go-sql-driver/mysql",
}

// allowed is below a forbidden prefix and still linked: the interfaces a
// type implements to be stored by database/sql (driver.Valuer), with no
// driver, connection or SQL in it. github.com/google/uuid and minio-go's
// dependencies (github.com/rs/xid) import it for their Value methods, so
// whatever links the S3 client (internal/blob) or uuid links it (doc.go).
var allowed = []string{"database/sql/driver"}

const module = "github.com/kilnhq/kiln/"

// linked lists, for each of pkgs, the forbidden entries it links,
// directly or not (go list -deps, one call per package so each answers for
// itself), each named once however many of its subpackages are linked.
func linked(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	bad := map[string][]string{}
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if slices.Contains(allowed, p) {
				continue
			}
			for _, f := range forbidden {
				name := f
				if p != f {
					name = f + "/…"
				}
				if (p == f || strings.HasPrefix(p, f+"/")) && !slices.Contains(bad[pkg], name) {
					bad[pkg] = append(bad[pkg], name)
				}
			}
		}
	}
	return bad
}

// TestNodeLocalImportsNoDatabase: the node-local packages link no
// database code. internal/servers, which keeps the records, does: the
// check sees it.
func TestNodeLocalImportsNoDatabase(t *testing.T) {
	for pkg, bad := range linked(t, nodeLocal...) {
		t.Errorf("%s links %v", pkg, bad)
	}
	if bad := linked(t, "internal/servers"); len(bad["internal/servers"]) == 0 {
		t.Errorf("internal/servers links none of %v: the check sees nothing", forbidden)
	}
}
