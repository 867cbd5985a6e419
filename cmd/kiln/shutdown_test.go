package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
)

// devServe starts kiln serve --dev on a fresh data dir and returns it with
// the bootstrap token.
func devServe(t *testing.T, extra ...string) (*proc, string, []string) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"--data-dir", dir, "--dev", "--port-range", serverstest.PortRange(t, 10).String()}, extra...)
	p := startServe(t, args...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	return p, token, args
}

// createServer creates a kiln-test server, waits for its install and, when
// start is set, starts it and waits until it runs. It returns the id and
// the game address.
func createServer(t *testing.T, p *proc, token, name string, start bool) (string, string) {
	t.Helper()
	code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"`+name+`","software":"kiln-test","memory_mb":512,"disk_mb":1024}`)
	if code != 202 {
		t.Fatalf("create: %d %v", code, out)
	}
	sv := out["server"].(map[string]any)
	id := sv["id"].(string)
	waitServer(t, p.addr, token, id, "offline")
	if start {
		if code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/power", `{"action":"start"}`); code != 202 {
			t.Fatalf("start: %d %v", code, out)
		}
		waitServer(t, p.addr, token, id, "running")
	}
	return id, sv["address"].(string)
}

// openStream opens a server's console stream and returns a channel that
// receives the read's error (nil: the stream ended cleanly) once the body
// ends.
func openStream(t *testing.T, addr, token, id string) <-chan error {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/api/client/v1/servers/"+id+"/console/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("console stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("console stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("console stream's first line = %q, %v", line, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()
	return ended
}

// stopClean sends SIGTERM and wants exit status 0 and a stopped log.
func stopClean(t *testing.T, p *proc) {
	t.Helper()
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("kiln serve after SIGTERM: %v, want exit 0\nstderr:\n%s", err, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), "msg=stopped") {
		t.Errorf("no stopped line in the log:\n%s", p.Stderr())
	}
}

func waitEnded(t *testing.T, ended <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("%s ended with %v, want a clean end", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s still open 30 s after kiln serve exited", what)
	}
}

// TestSIGTERMFinishes: SIGTERM makes kiln serve exit 0 whatever is in
// flight.
func TestSIGTERMFinishes(t *testing.T) {
	t.Run("console stream", func(t *testing.T) {
		p, token, _ := devServe(t)
		id, _ := createServer(t, p, token, "streamed", false)
		ended := openStream(t, p.addr, token, id)
		stopClean(t, p)
		waitEnded(t, ended, "the console stream")
	})

	t.Run("pull in flight", func(t *testing.T) {
		// The upstream sends the headers and a first piece, then nothing
		// until kiln goes away (or the test ends).
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1048576")
			w.WriteHeader(200)
			w.Write(bytes.Repeat([]byte("k"), 1024))
			w.(http.Flusher).Flush()
			once.Do(func() { close(started) })
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer up.Close()
		defer close(release)
		p, token, args := devServe(t, "--pull-allow-cidr", "127.0.0.0/8")
		id, _ := createServer(t, p, token, "pulling", false)
		code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/files/pull", `{"url":"`+up.URL+`/big.jar","directory":"/"}`)
		if code != 202 {
			t.Fatalf("pull: %d %v", code, out)
		}
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the download never reached the upstream")
		}
		stopClean(t, p)
		// The next start finds the download failed, not running.
		p2 := startServe(t, args...)
		code, out = call(t, p2.addr, token, "GET", "/servers/"+id+"/files/pull", "")
		if code != 200 || !strings.Contains(fmt.Sprint(out), "status:failed") {
			t.Errorf("downloads after the restart: %d %v, want the download failed", code, out)
		}
		stopClean(t, p2)
	})

	t.Run("process server", func(t *testing.T) {
		p, token, args := devServe(t)
		id, addr := createServer(t, p, token, "kept", true)
		ended := openStream(t, p.addr, token, id)
		level := filepath.Join(args[1], "servers", id, "world", "level.dat")
		before, err := os.ReadFile(level)
		if err != nil {
			t.Fatal(err)
		}
		pids := testserverPIDs(portOf(addr))
		if len(pids) != 1 {
			t.Fatalf("game processes: %v, want 1", pids)
		}
		stopClean(t, p)
		waitEnded(t, ended, "the console stream")
		// The game server runs on, untouched: the same process, answering,
		// its world not saved (it was not stopped).
		pingAddr(t, addr)
		if after := testserverPIDs(portOf(addr)); !slices.Equal(after, pids) {
			t.Errorf("game processes after kiln serve exited: %v, want %v still running", after, pids)
		}
		if after, _ := os.ReadFile(level); !bytes.Equal(before, after) {
			t.Error("level.dat changed: the server was stopped")
		}
		printWhileDown(t, args[1], id, "said between the two")
		// The next start re-attaches to it.
		p2 := startServe(t, args...)
		waitServer(t, p2.addr, token, id, "running")
		if after := testserverPIDs(portOf(addr)); !slices.Equal(after, pids) {
			t.Errorf("game processes after the restart: %v, want %v re-attached", after, pids)
		}
		for _, want := range []string{"[Server] said between the two", "[kiln] re-attached to the running server"} {
			if !consoleHas(t, p2.addr, token, id, want) {
				t.Errorf("console after the restart lacks %q", want)
			}
		}
		// A stop after the re-attach works, gracefully.
		stopServer(t, p2, token, id, addr)
		if after, _ := os.ReadFile(level); bytes.Equal(before, after) {
			t.Error("level.dat unchanged by the stop: the server was not stopped gracefully")
		}
		stopClean(t, p2)
	})

	t.Run("process server, --stop-servers-on-exit", func(t *testing.T) {
		p, token, args := devServe(t, "--stop-servers-on-exit")
		id, addr := createServer(t, p, token, "graceful", true)
		ended := openStream(t, p.addr, token, id)
		level := filepath.Join(args[1], "servers", id, "world", "level.dat")
		before, err := os.ReadFile(level)
		if err != nil {
			t.Fatal(err)
		}
		stopClean(t, p)
		waitEnded(t, ended, "the console stream")
		// The game server got its stop command: it saved the world
		// (LastPlayed changed) before it ended. Killed, it would not have.
		after, err := os.ReadFile(level)
		if err != nil || bytes.Equal(before, after) {
			t.Errorf("level.dat unchanged by the shutdown (%v): the server was not stopped gracefully", err)
		}
		if n := testserverProcs(portOf(addr)); n != 0 {
			t.Errorf("%d game server processes left after kiln serve exited", n)
		}
		if ids, _ := os.ReadDir(filepath.Join(args[1], "run")); len(ids) > 0 {
			if _, err := os.Stat(filepath.Join(args[1], "run", id, "holder.sock")); err == nil {
				t.Error("the server's holder is still there after kiln serve exited")
			}
		}
		// It comes back with the next start (its desired state is running).
		p2 := startServe(t, args...)
		waitServer(t, p2.addr, token, id, "running")
		stopClean(t, p2)
	})

	t.Run("docker", func(t *testing.T) {
		cli := dockerOrSkip(t)
		p, token, args := devServe(t, slices.Concat([]string{"--runtime", "docker"}, dockerNetwork(t))...)
		id, _ := createServer(t, p, token, "kept", true)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cli.ContainerRemove(ctx, docker.ContainerName(id), client.ContainerRemoveOptions{Force: true})
		})
		ended := openStream(t, p.addr, token, id)
		before := containerOf(t, cli, id)
		stopClean(t, p)
		waitEnded(t, ended, "the console stream")
		res, err := cli.ContainerInspect(t.Context(), before, client.ContainerInspectOptions{})
		if err != nil || !res.Container.State.Running {
			t.Fatalf("container after SIGTERM of kiln serve: %v, want it still running", err)
		}
		// The engine, stopping the container itself, gives it the grace
		// Kiln gives a server, not its own 10 s.
		if got, want := res.Container.Config.StopTimeout, int(servers.DefaultStopTimeout/time.Second); got == nil || *got != want {
			t.Errorf("container StopTimeout = %v, want %d s", got, want)
		}
		// Nothing the server is told inside names the host's data dir.
		for _, kv := range slices.Concat(res.Container.Config.Env, res.Container.Config.Cmd) {
			if strings.Contains(kv, args[1]) {
				t.Errorf("container env or command %q names the data dir %s", kv, args[1])
			}
		}
		p2 := startServe(t, args...)
		waitServer(t, p2.addr, token, id, "running")
		if after := containerOf(t, cli, id); after != before {
			t.Errorf("container %s replaced by %s: want the running one re-adopted", before, after)
		}
		if !consoleHas(t, p2.addr, token, id, "[kiln] re-attached to the running server") {
			t.Error("console does not say the server was re-attached")
		}
		if code, out := call(t, p2.addr, token, "DELETE", "/servers/"+id, ""); code != 200 {
			t.Fatalf("delete: %d %v", code, out)
		}
		stopClean(t, p2)
	})
}

// dockerOrSkip connects to the Docker Engine, or skips the test when there
// is none, unless KILN_REQUIRE_DOCKER=1.
func dockerOrSkip(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		_, err = cli.Ping(t.Context(), client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("KILN_REQUIRE_DOCKER") != "1" {
			t.Skipf("SKIP DOCKER SUITE: no Docker Engine: %v", err)
		}
		t.Fatalf("docker: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// dockerNetwork returns the flags giving kiln serve a network of the
// test's own (--docker-network), and removes that network and the rules
// kiln serve loaded for its bridge when the test ends (after the test's
// containers, whose cleanups are registered later and so run first).
func dockerNetwork(t *testing.T) []string {
	t.Helper()
	name := fmt.Sprintf("kt%08x", rand.Uint32())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if cli, err := client.New(client.FromEnv); err == nil {
			if _, err := cli.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("remove network %s: %v", name, err)
			}
			cli.Close()
		}
		if err := node.RemoveEgress(ctx, node.Egress{Bridge: name}); err != nil && os.Geteuid() == 0 && !errors.Is(err, node.ErrNoNft) {
			t.Errorf("remove the rules of %s: %v", name, err)
		}
	})
	return []string{"--docker-network", name}
}

// containerOf returns the id of the one container of a server.
func containerOf(t *testing.T, cli *client.Client, serverID string) string {
	t.Helper()
	res, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "kiln.server="+serverID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != 1 {
		t.Fatalf("%d containers of server %s, want exactly 1", len(res.Items), serverID)
	}
	return res.Items[0].ID
}

// A recovery that fails stops kiln serve with the reason and a non-zero
// exit status; it does not go on serving.
func TestRecoveryFailureExits(t *testing.T) {
	p, token, args := devServe(t)
	id, _ := createServer(t, p, token, "broken", false)
	stopClean(t, p)
	db, err := store.Open(t.Context(), store.Options{DataDir: args[1]})
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Write().ExecContext(t.Context(), `UPDATE servers SET env = '{not json' WHERE id = $1`, id)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := kiln(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--sftp-addr", "127.0.0.1:0"}, args...)...)
	if code != 1 || !strings.Contains(errOut, "kiln: servers: recover servers: read the servers of node local: server "+id+" env") {
		t.Errorf("kiln serve with a server it cannot recover: exit %d, stderr:\n%s\nwant exit 1 and the reason", code, errOut)
	}
	if strings.Contains(errOut, "kiln serving") {
		t.Error("kiln serve answered requests although recovery failed")
	}
}
