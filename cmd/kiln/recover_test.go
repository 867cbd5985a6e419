package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/runtime/docker"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
)

// call sends one JSON request to a kiln serve and decodes the answer.
func call(t *testing.T, addr, token, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+addr+"/api/client/v1"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	return resp.StatusCode, out
}

func waitServer(t *testing.T, addr, token, id, status string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var sv map[string]any
	for time.Now().Before(deadline) {
		code, out := call(t, addr, token, "GET", "/servers/"+id, "")
		if code == 429 {
			// A slow start (a container on a loaded machine) outlasts
			// the token's 100 requests a minute: poll slower.
			time.Sleep(time.Second)
			continue
		}
		if code != 200 {
			t.Fatalf("GET server: %d %v", code, out)
		}
		sv = out["server"].(map[string]any)
		if sv["status"] == status {
			return sv
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server %s never became %s: %v", id, status, sv)
	return nil
}

func consoleHas(t *testing.T, addr, token, id, want string) bool {
	t.Helper()
	_, out := call(t, addr, token, "GET", "/servers/"+id+"/console?size=500", "")
	for _, l := range out["lines"].([]any) {
		if strings.Contains(l.(string), want) {
			return true
		}
	}
	return false
}

// testserverProcs counts `kiln testserver` processes listening on port.
func testserverProcs(port string) int { return len(testserverPIDs(port)) }

// TestKillNineRecovers kills `kiln serve` with SIGKILL while a server runs,
// starts another kiln binary on the same data (an upgrade: a different
// version) and checks that the server ran on and
// is re-adopted, never orphaned, never twice: on the process runtime the
// game server outlives kiln under its holder (the same process after, a
// line it printed while kiln was down in the console, a stop through the
// re-attached console); on docker the container outlives kiln.
func TestKillNineRecovers(t *testing.T) {
	t.Run("process", func(t *testing.T) { killNineRecovers(t, "process") })
	t.Run("docker", func(t *testing.T) { killNineRecovers(t, "docker") })
}

// sayInContainer makes the game of container id print text while kiln
// is down: a say command written to the container's stdin through the
// engine (as kiln's console would), then its log read until the line is
// there.
func sayInContainer(t *testing.T, cli *client.Client, id, text string) {
	t.Helper()
	res, err := cli.ContainerAttach(t.Context(), id, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = res.Conn.Write([]byte("say " + text + "\n"))
	res.Close()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rc, err := cli.ContainerLogs(t.Context(), id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "50"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if strings.Contains(string(b), "[Server] "+text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never printed %q:\n%s", text, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func killNineRecovers(t *testing.T, rt string) {
	dir := t.TempDir()
	ports := serverstest.PortRange(t, 10)
	args := []string{"--data-dir", dir, "--dev", "--port-range", ports.String(), "--runtime", rt}
	var cli *client.Client
	if rt == "docker" {
		var err error
		cli, err = client.New(client.FromEnv)
		if err == nil {
			_, err = cli.Ping(t.Context(), client.PingOptions{})
		}
		if err != nil {
			if os.Getenv("KILN_REQUIRE_DOCKER") != "1" {
				t.Skipf("SKIP DOCKER SUITE: no Docker Engine: %v", err)
			}
			t.Fatalf("docker: %v", err)
		}
		defer cli.Close()
		args = append(args, dockerNetwork(t)...)
	}
	p := startServe(t, args...)
	token := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "bootstrap-token")))))
	code, out := call(t, p.addr, token, "POST", "/servers", `{"name":"survivor","software":"kiln-test","memory_mb":512,"disk_mb":1024}`)
	if code != 202 {
		t.Fatalf("create: %d %v", code, out)
	}
	sv := out["server"].(map[string]any)
	id, addr := sv["id"].(string), sv["address"].(string)
	port := addr[strings.LastIndex(addr, ":")+1:]
	t.Cleanup(func() {
		if cli != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cli.ContainerRemove(ctx, docker.ContainerName(id), client.ContainerRemoveOptions{Force: true})
		}
	})
	waitServer(t, p.addr, token, id, "offline")
	if code, out := call(t, p.addr, token, "POST", "/servers/"+id+"/power", `{"action":"start"}`); code != 202 {
		t.Fatalf("start: %d %v", code, out)
	}
	waitServer(t, p.addr, token, id, "running")
	containerID := func() string {
		t.Helper()
		res, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "kiln.server="+id)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Items) != 1 {
			t.Fatalf("%d containers of server %s, want exactly 1", len(res.Items), id)
		}
		return res.Items[0].ID
	}
	var before string
	var pids []int
	if rt == "docker" {
		before = containerID()
	} else if pids = testserverPIDs(port); len(pids) != 1 {
		t.Fatalf("game processes on port %s: %v, want 1", port, pids)
	}

	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done

	// The server outlives kiln serve (its holder, or the engine, keeps
	// it). Generous: a live server may answer slowly on a loaded machine.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	_, pingErr := slp.Ping(ctx, addr)
	cancel()
	if pingErr != nil {
		t.Fatalf("the server should outlive kill -9 of kiln serve: ping %v", pingErr)
	}
	if rt == "process" {
		printWhileDown(t, dir, id, "printed while kiln was down")
	} else {
		sayInContainer(t, cli, before, "printed while kiln was down")
	}

	// The next kiln is another binary: an upgrade after a kill -9.
	p2 := startServeOf(t, secondKiln(t), args...)
	if !strings.Contains(p2.Stderr(), "version=v9.9.9-upgrade") {
		t.Errorf("the kiln started after the kill is not the second binary:\n%s", p2.Stderr())
	}
	waitServer(t, p2.addr, token, id, "running")
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := slp.Ping(ctx, addr); err != nil {
		t.Fatalf("ping after recovery: %v", err)
	}
	switch rt {
	case "process":
		if after := testserverPIDs(port); !slices.Equal(after, pids) {
			t.Errorf("game processes after recovery: %v, want %v re-adopted", after, pids)
		}
		if !consoleHas(t, p2.addr, token, id, "[Server] printed while kiln was down") {
			t.Error("the console lacks the line printed while kiln was down")
		}
	case "docker":
		if after := containerID(); after != before {
			t.Errorf("container %s replaced by %s: want the running one re-adopted", before, after)
		}
		if !consoleHas(t, p2.addr, token, id, "[Server] printed while kiln was down") {
			t.Error("the console lacks the line the container printed while kiln was down")
		}
	}
	if !consoleHas(t, p2.addr, token, id, "[kiln] re-attached to the running server") {
		t.Error("console does not say the server was re-attached")
	}
	// The console works after recovery (docker: through the new attach).
	if code, out := call(t, p2.addr, token, "POST", "/servers/"+id+"/command", `{"command":"say back again"}`); code != 200 {
		t.Fatalf("command: %d %v", code, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !consoleHas(t, p2.addr, token, id, "[Server] back again") {
		if time.Now().After(deadline) {
			t.Fatal("the command's output never reached the console")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rt == "process" {
		// A stop through the re-attached holder works.
		stopServer(t, p2, token, id, addr)
	}
	if code, out := call(t, p2.addr, token, "DELETE", "/servers/"+id, ""); code != 200 {
		t.Fatalf("delete: %d %v", code, out)
	}
	if rt == "docker" {
		res, _ := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "kiln.server="+id)})
		if len(res.Items) != 0 {
			t.Errorf("container left after delete: %v", res.Items)
		}
	} else if _, err := os.Stat(filepath.Join(dir, "run", id)); !os.IsNotExist(err) {
		t.Errorf("the holder's directory is left after delete (stat: %v)", err)
	}
	if err := p2.stop(os.Interrupt); err != nil {
		t.Errorf("kiln serve after SIGINT: %v\n%s", err, p2.Stderr())
	}
}
