package api

import (
	"bytes"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestCreateServerPlaced: POST /servers places the server on the node
// asked, or chooses one; an unknown node is a 400 at node; a server no
// node takes (memory within 2 GiB × the overcommit 1.5, agents and
// another kiln serve's node not taking servers in this version) a 409
// NO_CAPACITY whose details say why for each node.
func TestCreateServerPlaced(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarnessOn(t, db, serverstest.Options{NodeMemory: 2 << 30, Overcommit: 1.5})
		ctx := t.Context()
		// Another kiln serve's local node, ready with room to spare, and
		// an agent added (not joined).
		ns := nodes.New(db, nil)
		if err := ns.RegisterLocal(ctx, "other", cluster.Hello{PortFirst: 25565, PortLast: 25664, Runtime: "process"}); err != nil {
			t.Fatal(err)
		}
		if err := ns.BeatLocal(ctx, "other", cluster.Heartbeat{MemoryTotal: 64 << 30, DiskTotal: 1 << 40}, time.Hour); err != nil {
			t.Fatal(err)
		}
		box, err := secretbox.New(bytes.Repeat([]byte{1}, secretbox.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		ca, err := nodes.EnsureCA(ctx, db, box, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ns.Add(ctx, "edge", ca); err != nil {
			t.Fatal(err)
		}
		create := func(mem int, node any) (int, []byte) {
			t.Helper()
			req := map[string]any{"name": "s", "software": "kiln-test", "memory_mb": mem, "disk_mb": 1024}
			if node != nil {
				req["node"] = node
			}
			return h.postJSON("/servers", req)
		}
		exact := func(what string, st int, body []byte, wantSt int, want string) {
			t.Helper()
			if st != wantSt || string(body) != want+"\n" {
				t.Errorf("%s = %d %s\nwant %d %s", what, st, body, wantSt, want)
			}
		}
		agents := `not joined yet` // edge was added, never joined
		replica := `the local node of another kiln serve, which alone creates servers on it in this version`

		st, body := create(512, "nope")
		exact("a server on an unknown node", st, body, 400,
			`{"error":"node: no node is named \"nope\"","code":"VALIDATION_ERROR","issues":[{"path":"node","message":"no node is named \"nope\""}]}`)
		st, body = create(512, "")
		exact("a server on node \"\"", st, body, 400,
			`{"error":"node: must be a node's name; leave node out to let Kiln choose one","code":"VALIDATION_ERROR","issues":[{"path":"node","message":"must be a node's name; leave node out to let Kiln choose one"}]}`)
		st, body = create(512, "no such/name")
		exact("a server on a malformed node name", st, body, 400,
			`{"error":"node: must be a node's name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit","code":"VALIDATION_ERROR","issues":[{"path":"node","message":"must be a node's name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"}]}`)
		st, body = create(4096, nil)
		exact("a server no node takes", st, body, 409,
			`{"error":"no node can take the server: node edge: `+agents+`; node local: 3072 MiB of memory free, 4096 asked; node other: `+replica+`",`+
				`"code":"NO_CAPACITY","details":[{"node":"edge","reason":"`+agents+`"},{"node":"local","reason":"3072 MiB of memory free, 4096 asked"},{"node":"other","reason":"`+replica+`"}]}`)
		st, body = create(512, "other")
		exact("a server on another kiln serve's node", st, body, 409,
			`{"error":"no node can take the server: node other: `+replica+`","code":"NO_CAPACITY","details":[{"node":"other","reason":"`+replica+`"}]}`)
		st, body = create(512, "edge")
		exact("a server on an agent not joined", st, body, 409,
			`{"error":"no node can take the server: node edge: `+agents+`","code":"NO_CAPACITY","details":[{"node":"edge","reason":"`+agents+`"}]}`)

		// 2048 + 1024 MiB on a node of 2 GiB: the overcommit lets them in.
		for _, tc := range []struct {
			mem  int
			node any
		}{{2048, "local"}, {1024, nil}} {
			st, body = create(tc.mem, tc.node)
			if sv, _ := mustJSON(body)["server"].(map[string]any); st != 202 || sv["node"] != "local" || sv["memory_mb"] != float64(tc.mem) {
				t.Fatalf("a server of %d MiB on %v = %d %s; want 202 on local", tc.mem, tc.node, st, body)
			}
		}
		st, body = create(256, "local")
		exact("a server past 2 GiB × 1.5", st, body, 409,
			`{"error":"no node can take the server: node local: 0 MiB of memory free, 256 asked","code":"NO_CAPACITY","details":[{"node":"local","reason":"0 MiB of memory free, 256 asked"}]}`)
	})
}
