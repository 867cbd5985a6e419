package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/node/nodetest"
	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
)

// procStatus reads the fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// readAs tries to read path as uid and gid (no supplementary groups, as
// the server runs) with cat, and returns cat's error output ("" when it
// read the file).
func readAs(t *testing.T, uid, gid uint32, path string) string {
	t.Helper()
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err == nil {
		return ""
	}
	if _, ok := errors.AsType[*exec.ExitError](err); !ok {
		t.Fatalf("run cat as %d: %v", uid, err)
	}
	return string(out)
}

// TestServersRunAsTheirOwnUsers: kiln serve as root on the process
// runtime runs each server as a user of its own, with no_new_privs and a
// /tmp and /dev/shm of its own, and what one server's code can do as its
// user: read its own files, and not another team's server's files, nor
// what it left in its /tmp, that server's environment
// (/proc/<pid>/environ), kiln's database or its secret key (EACCES).
// Files written through the API belong to the server's user, and the
// servers' users reach the node's game ports but not the host's other
// services (the network rules, --server-egress guarded).
func TestServersRunAsTheirOwnUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: needs root (kiln gives each server a user of its own only as root)")
	}
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 5)
	p := startServe(t, "--data-dir", dir, "--dev", "--port-range", ports.String())
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	out, errOut, code := kiln(t, "admin", "team", "create", "other", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("team create: %s %s", out, errOut)
	}
	out, errOut, code = kiln(t, "admin", "token", "create", "--team", "other", "--kind", "user", "--name", "t", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("token create: %s %s", out, errOut)
	}
	other := strings.TrimSpace(out)

	type srv struct {
		id, port, root string
		pid            int
		uid, gid       uint32
	}
	start := func(token, name string) srv {
		code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"`+name+`","software":"kiln-test","memory_mb":512,"disk_mb":1024}`)
		if code != 202 {
			t.Fatalf("create %s: %d %v", name, code, out)
		}
		sv := out["server"].(map[string]any)
		id := sv["id"].(string)
		waitServer(t, p.addr, token, id, "offline")
		if code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/power", `{"action":"start"}`); code != 200 && code != 202 {
			t.Fatalf("start %s: %d %v", name, code, out)
		}
		sv = waitServer(t, p.addr, token, id, "running")
		addr := sv["address"].(string)
		port := addr[strings.LastIndex(addr, ":")+1:]
		pids := testserverPIDs(port)
		if len(pids) != 1 {
			t.Fatalf("%s: %d game processes on port %s", name, len(pids), port)
		}
		st := procStatus(t, pids[0])
		uids, gids := strings.Fields(st["Uid"]), strings.Fields(st["Gid"])
		uid, _ := strconv.ParseUint(uids[0], 10, 32)
		gid, _ := strconv.ParseUint(gids[0], 10, 32)
		for _, u := range append(uids, gids...) {
			if u != uids[0] {
				t.Errorf("%s runs with uids %v gids %v: want one id for all", name, uids, gids)
			}
		}
		if uid < 200000 || uid > 299999 {
			t.Errorf("%s runs as uid %d: want one of the default --uid-range 200000-299999", name, uid)
		}
		if st["NoNewPrivs"] != "1" || st["Groups"] != "" {
			t.Errorf("%s: NoNewPrivs %q, Groups %q; want 1 and none", name, st["NoNewPrivs"], st["Groups"])
		}
		root := filepath.Join(dir, "servers", id)
		var rst syscall.Stat_t
		must0(syscall.Stat(root, &rst))
		if rst.Uid != uint32(uid) || rst.Mode&0o777 != 0o700 {
			t.Errorf("%s's root: owner %d mode %o; want %d and 0700", name, rst.Uid, rst.Mode&0o777, uid)
		}
		return srv{id: id, port: port, root: root, pid: pids[0], uid: uint32(uid), gid: uint32(gid)}
	}
	a := start(token, "a")
	b := start(other, "b")
	if a.uid == b.uid {
		t.Fatalf("both servers run as uid %d", a.uid)
	}

	// A file written through the API is the server's user's.
	if code, out := call(t, p.addr, token, "POST", "/servers/"+a.id+"/files/create-directory", `{"root":"/","name":"plugins/x"}`); code != 200 {
		t.Fatalf("create-directory: %d %v", code, out)
	}
	for _, rel := range []string{"plugins", "plugins/x", "server.properties", "world/level.dat"} {
		var st syscall.Stat_t
		must0(syscall.Lstat(filepath.Join(a.root, rel), &st))
		if st.Uid != a.uid || st.Gid != a.gid {
			t.Errorf("a's %s belongs to %d:%d, want its user %d:%d", rel, st.Uid, st.Gid, a.uid, a.gid)
		}
	}

	// What a's code can read as a's user.
	if e := readAs(t, a.uid, a.gid, filepath.Join(a.root, "server.properties")); e != "" {
		t.Errorf("a cannot read its own server.properties: %s", e)
	}
	if e := readAs(t, a.uid, a.gid, fmt.Sprintf("/proc/%d/environ", a.pid)); e != "" {
		t.Errorf("a cannot read its own environment: %s", e)
	}
	for _, path := range []string{
		filepath.Join(b.root, "server.properties"),
		filepath.Join(b.root, "world", "level.dat"),
		fmt.Sprintf("/proc/%d/environ", b.pid),
		filepath.Join(dir, "kiln.db"),
		filepath.Join(dir, "kiln.db-wal"),
		filepath.Join(dir, "secret.key"),
		filepath.Join(dir, "bootstrap-token"),
		filepath.Join(dir, "run", a.id, "holder.log"), // its holder's: the socket beside it commands the server
	} {
		if e := readAs(t, a.uid, a.gid, path); !strings.Contains(e, "Permission denied") {
			t.Errorf("a's user reading %s: %q; want Permission denied", path, e)
		}
	}
	// The /tmp wall: each server has a /tmp and a /dev/shm of its own
	// (a mount namespace with fresh tmpfs): a file a's code leaves there
	// for anyone to read (0644), here put through a's root as the game
	// sees it, is in neither b's nor the host's.
	hostNS, _ := os.Readlink("/proc/self/ns/mnt")
	nsA, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", a.pid))
	nsB, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", b.pid))
	if nsA == hostNS || nsB == hostNS || nsA == nsB {
		t.Errorf("mount namespaces: a %q, b %q, the host %q; want one of its own each", nsA, nsB, hostNS)
	}
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		name := fmt.Sprintf("kiln-left-by-%s", a.id)
		inA := fmt.Sprintf("/proc/%d/root%s/%s", a.pid, dir, name)
		t.Cleanup(func() { os.Remove(filepath.Join(dir, name)) }) // only if the wall is broken
		must0(os.WriteFile(inA, []byte("a's secret"), 0o644))
		must0(os.Chown(inA, int(a.uid), int(a.gid)))
		if e := readAs(t, a.uid, a.gid, inA); e != "" {
			t.Errorf("a cannot read its own %s/%s: %s", dir, name, e)
		}
		for who, path := range map[string]string{
			"b":        fmt.Sprintf("/proc/%d/root%s/%s", b.pid, dir, name),
			"the host": filepath.Join(dir, name),
		} {
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s sees the file a left in its %s (%s): %v", who, dir, path, err)
			}
		}
	}

	// The network wall: a's code reaches b's game port, not Kiln's API,
	// not another port of the host (b's RCON, say), not the host's other
	// addresses (Docker's bridge); kiln itself is not limited.
	rcon := nodetest.ServeHello(t, netip.MustParseAddrPort("127.0.0.1:0"))
	if e := nodetest.ConnectAs(t, a.uid, netip.MustParseAddrPort("127.0.0.1:"+b.port)); e != "" {
		t.Errorf("a to b's game port: %s", e)
	}
	for _, to := range []netip.AddrPort{netip.MustParseAddrPort(p.addr), rcon} {
		if e := nodetest.ConnectAs(t, a.uid, to); e == "" {
			t.Errorf("a's user connected to %s", to)
		}
		if e := nodetest.ConnectAs(t, 0, to); e != "" {
			t.Errorf("root to %s: %s", to, e)
		}
	}
	if br, err := net.InterfaceByName("docker0"); err == nil {
		if addrs, _ := br.Addrs(); len(addrs) > 0 {
			ip, _ := netip.AddrFromSlice(addrs[0].(*net.IPNet).IP.To4())
			if to := nodetest.ServeHello(t, netip.AddrPortFrom(ip, 0)); nodetest.ConnectAs(t, a.uid, to) == "" {
				t.Errorf("a's user connected to the host's bridge address %s", to)
			}
		}
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("kiln serve after SIGINT: %v\n%s", err, p.Stderr())
	}
}

// TestUsersRefusedAtStart: as root, kiln serve refuses, before it makes
// anything (no database, no bootstrap token), a --uid-range holding a
// user of the host and a data dir its servers' users could not reach.
func TestUsersRefusedAtStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: needs root (kiln gives each server a user of its own only as root)")
	}
	closed := t.TempDir() // 0700, made by the testing package
	dir := filepath.Join(closed, "data")
	_, errOut, code := kilnAsIs(t, "serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--sftp-addr", "")
	if code != 2 || !strings.Contains(errOut, "lets no other user through: run chmod o+x "+filepath.Dir(closed)) {
		t.Errorf("serve below a closed directory: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "bootstrap-token")); !os.IsNotExist(err) {
		t.Errorf("a refused start made a bootstrap token: %v", err)
	}
	open := t.TempDir()
	passable(t, []string{"--data-dir", filepath.Join(open, "data")})
	_, errOut, code = kiln(t, "serve", "--data-dir", filepath.Join(open, "data"), "--addr", "127.0.0.1:0", "--sftp-addr", "", "--uid-range", "1-100")
	if code != 2 || !strings.Contains(errOut, "--uid-range: the range 1-100 holds the user") {
		t.Errorf("serve with a range holding host users: exit %d, %s", code, errOut)
	}
}

// TestContainersRunAsTheirOwnUsers: kiln serve as root on the docker
// runtime runs each game container as its server's own user (the owner
// of its root, from --uid-range), not as root or one shared uid; a file
// written through the API while the container runs is that user's, so
// the game can rewrite it (an edited whitelist is not lost).
// --docker-user is for when users are off: with them, it is refused. The
// containers' network rules are loaded for the network's bridge.
func TestContainersRunAsTheirOwnUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("users of their own need kiln to run as root")
	}
	cli := dockerOrSkip(t)
	netArgs := dockerNetwork(t)
	p, token, args := devServe(t, slices.Concat([]string{"--runtime", "docker"}, netArgs)...)
	// The containers' network wall is loaded for its bridge (proven in
	// internal/runtime/docker's TestWalls).
	if out, err := exec.Command("nft", "list", "table", "inet", node.Egress{Bridge: netArgs[1]}.TableName()).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), `iifname "`+netArgs[1]+`" jump servers`) {
		t.Errorf("kiln serve --runtime docker loaded no rules for its bridge %s: %v\n%s", netArgs[1], err, out)
	}
	id, _ := createServer(t, p, token, "own", true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, docker.ContainerName(id), client.ContainerRemoveOptions{Force: true})
	})
	root := filepath.Join(args[1], "servers", id)
	var rst syscall.Stat_t
	if err := syscall.Stat(root, &rst); err != nil {
		t.Fatal(err)
	}
	if rst.Uid < 200000 || rst.Uid > 299999 || rst.Gid != rst.Uid || rst.Mode&0o777 != 0o700 {
		t.Fatalf("the root is %d:%d mode %o; want a user of --uid-range's, 0700", rst.Uid, rst.Gid, rst.Mode&0o777)
	}
	res, err := cli.ContainerInspect(t.Context(), containerOf(t, cli, id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d:%d", rst.Uid, rst.Gid)
	if got := res.Container.Config.User; got != want {
		t.Errorf("the container runs as %q, want its server's user %q", got, want)
	}
	if st := procStatus(t, res.Container.State.Pid); !strings.HasPrefix(st["Uid"], strconv.Itoa(int(rst.Uid))+"\t") {
		t.Errorf("the container's first process has Uid %q, want %d", st["Uid"], rst.Uid)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+p.addr+"/api/client/v1/servers/"+id+"/files/write?file=/whitelist.json", strings.NewReader("[]\n"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	wres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wres.Body.Close()
	if wres.StatusCode != 200 {
		t.Fatalf("write whitelist.json: %s", wres.Status)
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "whitelist.json"), &fst); err != nil {
		t.Fatal(err)
	}
	if fst.Uid != rst.Uid || fst.Gid != rst.Gid || fst.Mode&0o200 == 0 {
		t.Errorf("whitelist.json written while the container runs: %d:%d mode %o; want %s and writable by its owner", fst.Uid, fst.Gid, fst.Mode&0o777, want)
	}
	if err := p.stop(os.Interrupt); err != nil {
		t.Errorf("kiln serve after SIGINT: %v\n%s", err, p.Stderr())
	}

	// --docker-user with users of their own is refused, with what to do.
	cfg, err := parseServe([]string{"--runtime", "docker", "--docker-user", "10001:10001", "--data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serverUsers(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--uid-range off") {
		t.Errorf("serverUsers(--docker-user, users on) = %v; want a usage error naming --uid-range off", err)
	}
	cfg.uidRange = servers.UIDRange{}
	if rng, err := serverUsers(cfg, slog.New(slog.DiscardHandler)); err != nil || !rng.IsZero() {
		t.Errorf("serverUsers(--docker-user, --uid-range off) = %v, %v; want off, nil", rng, err)
	}
}
