package noderpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/kilnhq/kiln/internal/gameserver"
	"github.com/kilnhq/kiln/internal/serverroot"
)

// The Host's routes on the channel.
const (
	pathServers   = "/v1/servers/"
	pathResources = "/v1/resources"
)

// HostHandler serves host's operations to the control plane, on the
// channel the agent dials (agent.Config.Handler). Every server id is
// taken as the control plane sends it: the control plane checked the team
// and placed the server here; the Host answers ErrNotFound (through its
// records) for one this node does not hold.
func HostHandler(host *gameserver.Host) http.Handler {
	mux := http.NewServeMux()
	post := func(what string, do func(r *http.Request, id string) error) {
		mux.HandleFunc("POST "+pathServers+"{id}/"+what, func(w http.ResponseWriter, r *http.Request) {
			if err := do(r, r.PathValue("id")); err != nil {
				writeError(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	post("power", func(r *http.Request, id string) error {
		var b struct {
			Action string `json:"action"`
		}
		if err := readJSON(r, &b); err != nil {
			return err
		}
		return host.Power(r.Context(), id, b.Action)
	})
	post("command", func(r *http.Request, id string) error {
		var b struct {
			Line string `json:"line"`
		}
		if err := readJSON(r, &b); err != nil {
			return err
		}
		return host.Command(r.Context(), id, b.Line)
	})
	post("note", func(r *http.Request, id string) error {
		var b valueBody
		if err := readJSON(r, &b); err != nil {
			return err
		}
		host.Note(id, b.Value)
		return nil
	})
	post("install", func(r *http.Request, id string) error {
		var b struct {
			StartAfter bool `json:"start_after"`
		}
		if err := readJSON(r, &b); err != nil {
			return err
		}
		host.Install(id, b.StartAfter)
		return nil
	})
	post("reinstall", func(r *http.Request, id string) error {
		var b reinstallBody
		if err := readJSON(r, &b); err != nil {
			return err
		}
		return host.Reinstall(r.Context(), id, b.Software, b.Version, b.Env, b.StartAfter)
	})
	post("remove", func(r *http.Request, id string) error { return host.Remove(r.Context(), id) })
	post("forget", func(r *http.Request, id string) error { host.Forget(id); return nil })
	mux.HandleFunc("GET "+pathServers+"{id}/console", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		lines, err := host.Console(r.Context(), r.PathValue("id"), n)
		if err != nil {
			writeError(w, err)
			return
		}
		if lines == nil {
			lines = []string{}
		}
		writeJSON(w, http.StatusOK, lines)
	})
	mux.HandleFunc("GET "+pathServers+"{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		events, stop, err := host.Stream(r.Context(), r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		defer stop()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		enc := json.NewEncoder(w)
		for {
			select {
			case <-r.Context().Done():
				return
			case e, ok := <-events:
				if !ok {
					return // dropped, or the server deleted: the caller's stream ends too
				}
				if enc.Encode(wireEvent{Kind: e.Kind, Data: e.Data}) != nil || rc.Flush() != nil {
					return
				}
			}
		}
	})
	mux.HandleFunc("POST "+pathResources, func(w http.ResponseWriter, r *http.Request) {
		var ids []string
		if err := readJSON(r, &ids); err != nil {
			writeError(w, err)
			return
		}
		out := make(map[string]wireResources, len(ids))
		for _, id := range ids {
			res := host.Resources(id)
			out[id] = wireResources{CPU: res.CPU, MemoryBytes: res.MemoryBytes, DiskBytes: res.DiskBytes, UptimeMS: res.UptimeMS}
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

type wireEvent struct {
	Kind string `json:"kind"`
	Data string `json:"data"`
}

type wireResources struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	UptimeMS    int64   `json:"uptime_ms"`
}

// Remote drives the game servers of one agent node from the control
// plane, over its channel: the servers.Driver of that node. Client gives
// the node's HTTP client at each call (nodes.Endpoint.Client: an error,
// *nodes.UnavailableError, at once when the node has no channel here).
type Remote struct {
	Node   string
	Client func() (*http.Client, error)
	// IDs lists the node's servers, whose live figures Run fetches.
	IDs func(ctx context.Context) ([]string, error)
	// Every is how often Run fetches the figures (5 s when zero).
	Every time.Duration

	mu        sync.Mutex
	resources map[string]gameserver.Resources
	recovered chan struct{}
	once      sync.Once
}

func (rm *Remote) init() {
	rm.once.Do(func() {
		rm.recovered = make(chan struct{})
		close(rm.recovered) // the agent recovers its servers itself, at its own start
	})
}

func (rm *Remote) url(id, what string) string {
	return "http://" + rm.Node + pathServers + url.PathEscape(id) + "/" + what
}

func (rm *Remote) do(ctx context.Context, method, u string, in, out any) error {
	c, err := rm.Client()
	if err != nil {
		return err
	}
	var body io.Reader = http.NoBody
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Run fetches the live figures of the node's servers every Every until
// ctx ends; the agent recovers and samples its servers itself.
func (rm *Remote) Run(ctx context.Context) error {
	rm.init()
	every := rm.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rm.fetch(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (rm *Remote) fetch(ctx context.Context) {
	ids, err := rm.IDs(ctx)
	if err != nil || len(ids) == 0 {
		return
	}
	var got map[string]wireResources
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rm.do(fctx, http.MethodPost, "http://"+rm.Node+pathResources, ids, &got); err != nil {
		rm.mu.Lock()
		rm.resources = nil // a silent node keeps no figures
		rm.mu.Unlock()
		return
	}
	m := make(map[string]gameserver.Resources, len(got))
	for id, r := range got {
		m[id] = gameserver.Resources{CPU: r.CPU, MemoryBytes: r.MemoryBytes, DiskBytes: r.DiskBytes, UptimeMS: r.UptimeMS}
	}
	rm.mu.Lock()
	rm.resources = m
	rm.mu.Unlock()
}

// Recovered is closed at once: an agent recovers its servers at its own
// start, before it opens its channel.
func (rm *Remote) Recovered() <-chan struct{} { rm.init(); return rm.recovered }

// RecoveryFailed is false: the control plane does not recover an agent's
// servers.
func (rm *Remote) RecoveryFailed() bool { return false }

func (rm *Remote) Power(ctx context.Context, id, action string) error {
	return rm.do(ctx, http.MethodPost, rm.url(id, "power"), map[string]string{"action": action}, nil)
}

func (rm *Remote) Command(ctx context.Context, id, line string) error {
	return rm.do(ctx, http.MethodPost, rm.url(id, "command"), map[string]string{"line": line}, nil)
}

func (rm *Remote) Console(ctx context.Context, id string, n int) ([]string, error) {
	var lines []string
	err := rm.do(ctx, http.MethodGet, rm.url(id, "console")+"?n="+strconv.Itoa(n), nil, &lines)
	return lines, err
}

// Stream follows the server's console on the agent: one request whose
// answer is the events, a line each, until stop or the agent ends it.
func (rm *Remote) Stream(ctx context.Context, id string) (<-chan gameserver.Event, func(), error) {
	c, err := rm.Client()
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, rm.url(id, "stream"), nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		cancel()
		return nil, nil, readError(resp)
	}
	ch := make(chan gameserver.Event, 512)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e wireEvent
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				return
			}
			select {
			case ch <- gameserver.Event{Kind: e.Kind, Data: e.Data}:
			case <-sctx.Done():
				return
			}
		}
	}()
	return ch, cancel, nil
}

// Note writes a line of Kiln's own into the server's console on the
// agent, in the background: it says what happened, it changes nothing.
func (rm *Remote) Note(id, line string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rm.do(ctx, http.MethodPost, rm.url(id, "note"), valueBody{Value: line}, nil)
	}()
}

// Resources is the server's latest figures fetched by Run (zeros when
// none).
func (rm *Remote) Resources(id string) gameserver.Resources {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.resources[id]
}

// Install asks the agent to install a server just recorded. The request
// itself is quick (the agent installs in the background); an agent that
// cannot be reached leaves the record installing, and the agent's own
// recovery installs it when it starts (or its channel opens again).
func (rm *Remote) Install(id string, startAfter bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = rm.do(ctx, http.MethodPost, rm.url(id, "install"), map[string]bool{"start_after": startAfter}, nil)
}

func (rm *Remote) Reinstall(ctx context.Context, id, software, version string, env map[string]string, startAfter bool) error {
	return rm.do(ctx, http.MethodPost, rm.url(id, "reinstall"), reinstallBody{Software: software, Version: version, Env: env, StartAfter: startAfter}, nil)
}

func (rm *Remote) Remove(ctx context.Context, id string) error {
	return rm.do(ctx, http.MethodPost, rm.url(id, "remove"), nil, nil)
}

// Forget tells the agent the record is gone, in the background: an agent
// that does not hear it removes the root at its next start (no record
// names it).
func (rm *Remote) Forget(id string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rm.do(ctx, http.MethodPost, rm.url(id, "forget"), nil, nil)
	}()
}

func (rm *Remote) Access(context.Context, string, bool) (serverroot.Access, error) {
	return serverroot.Access{}, ErrNotHere
}

func (rm *Remote) Reading(context.Context, string) (*gameserver.Reader, error) {
	return nil, ErrNotHere
}

func (rm *Remote) Hold(context.Context, string) (*gameserver.Held, error) { return nil, ErrNotHere }

func (rm *Remote) DiskUsage(context.Context, string) (gameserver.Disk, error) {
	return gameserver.Disk{}, ErrNotHere
}

func (rm *Remote) DiskChanged(string) {}
