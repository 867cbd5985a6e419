package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kilnhq/kiln/internal/runtime"
)

const (
	writeTimeout = 10 * time.Second // a console write to a server that stopped reading stdin
	drainTimeout = 5 * time.Second  // output still in flight when the container has exited
)

// Container is one game server's container held by this kiln: its console
// stream and a watcher of its exit. It implements runtime.Instance.
type Container struct {
	d       *Docker
	id      string
	console func(string)

	cancel  context.CancelFunc // ends the exit watcher: Detach
	done    chan struct{}      // the container has ended
	stopped chan struct{}      // the goroutines have returned (ended or detached)

	wmu sync.Mutex // one console write at a time

	mu   sync.Mutex
	hj   client.HijackedResponse // the console stream; a new one after the engine came back
	exit runtime.Exit
	sent syscall.Signal // the last signal Stop or Kill sent
	prev cpuSample
}

var _ runtime.Instance = (*Container)(nil)

// attach opens the console stream of container id and starts watching for
// its exit (cond: next-exit before a start, not-running for adoption).
func (d *Docker) attach(ctx context.Context, id string, console func(string), cond container.WaitCondition) (*Container, error) {
	if console == nil {
		console = func(string) {}
	}
	// The wait outlives ctx (a request's); ctx only bounds its set-up.
	wctx, cancel := context.WithCancel(context.Background())
	hj, wait, err := d.stream(ctx, wctx, cancel, id, cond)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &Container{
		d: d, id: id, console: console, hj: hj,
		cancel: cancel, done: make(chan struct{}), stopped: make(chan struct{}),
	}
	outDone := c.copyOut(hj)
	d.track(c)
	go c.watch(wctx, wait, outDone)
	return c, nil
}

// stream opens the console stream of container id and registers a wait
// for cond that lasts until wctx ends (cancel ends it when ctx, which
// bounds the set-up, ends first).
func (d *Docker) stream(ctx, wctx context.Context, cancel context.CancelFunc, id string, cond container.WaitCondition) (client.HijackedResponse, client.ContainerWaitResult, error) {
	var none client.ContainerWaitResult
	res, err := d.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return client.HijackedResponse{}, none, fmt.Errorf("attach console: %w", err)
	}
	stop := context.AfterFunc(ctx, cancel)
	wait := d.cli.ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: cond})
	inTime := stop()
	// A wait that could not be set up has its error waiting already.
	select {
	case err = <-wait.Error:
	default:
		if !inTime {
			err = ctx.Err()
		}
	}
	if err != nil {
		res.Close()
		return client.HijackedResponse{}, none, fmt.Errorf("wait for container: %w", err)
	}
	return res.HijackedResponse, wait, nil
}

// copyOut delivers the output of the console stream hj line by line; the
// channel closes when the stream has ended (the container exited, the
// engine went away, or Detach closed it).
func (c *Container) copyOut(hj client.HijackedResponse) <-chan struct{} {
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		out, errOut := newLineWriter(c.console), newLineWriter(c.console)
		_, _ = stdcopy.StdCopy(out, errOut, hj.Reader)
		out.Flush()
		errOut.Flush()
	}()
	return outDone
}

func (c *Container) stream() client.HijackedResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hj
}

func (c *Container) closeStream() {
	hj := c.stream()
	hj.Close()
}

// watch waits for the container to end, lets the console drain and records
// how it ended. A wait that fails is no end: the engine went away
// (restarted, upgraded, its socket gone), so watch waits for it and looks
// again (reconnect). After a Detach it returns without recording anything.
func (c *Container) watch(wctx context.Context, wait client.ContainerWaitResult, outDone <-chan struct{}) {
	defer close(c.stopped)
	defer c.d.forget(c)
	var exit runtime.Exit
	for ended := false; !ended; {
		select {
		case r := <-wait.Result:
			exit, ended = c.exitOf(r), true
			if c.engineLeaving(wctx) {
				c.closeStream()
				<-outDone
				return // Detach
			}
		case err := <-wait.Error:
			c.closeStream()
			<-outDone
			if wctx.Err() != nil { // Detach
				return
			}
			var detached bool
			if wait, outDone, exit, detached = c.reconnect(wctx, err); detached {
				return
			}
			if outDone == nil {
				outDone, ended = closed, true
			}
		}
	}
	t := time.NewTimer(drainTimeout)
	select {
	case <-outDone:
	case <-t.C:
	}
	t.Stop()
	c.closeStream()
	<-outDone
	c.mu.Lock()
	c.exit = exit
	c.mu.Unlock()
	close(c.done)
}

// engineLeaving runs when the container ended by itself or by the
// engine (not a signal of Kiln's): when the engine no longer takes new
// connections, it is shutting down and stopped the container, so the end
// is told only once the engine is back (awaitEngine), and a restart is
// not tried meanwhile. It reports whether Detach came first.
func (c *Container) engineLeaving(wctx context.Context) (detached bool) {
	c.mu.Lock()
	sent := c.sent
	c.mu.Unlock()
	if sent != 0 || wctx.Err() != nil {
		return false
	}
	err := c.d.answers(wctx)
	if err == nil || wctx.Err() != nil {
		return false
	}
	c.d.log.Warn("a container ended while the container engine goes away; waiting for the engine", "container_id", c.id, "err", err)
	c.console("[kiln] the container engine is going away; waiting for it")
	return c.d.awaitEngine(wctx) != nil && wctx.Err() != nil
}

// closed is a channel that is closed.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// reconnect runs when the wait on the container failed: it waits for the
// engine (awaitEngine) and looks at the container again. Still running
// (the engine kept it: live-restore): the console stream and the wait are
// opened again (a signal Stop or Kill could not deliver meanwhile is sent
// again) and returned. Ended meanwhile (the engine stopped it): how, with
// a nil outDone. Gone, or the engine not back within the wait: an exit
// saying so. detached: Detach came first, nothing is to be recorded.
func (c *Container) reconnect(wctx context.Context, cause error) (wait client.ContainerWaitResult, outDone <-chan struct{}, exit runtime.Exit, detached bool) {
	log := c.d.log.With("container_id", c.id)
	log.Warn("lost the wait on a container; waiting for the container engine", "err", cause)
	c.console("[kiln] the container engine stopped answering; waiting for it")
	lost := func(err error) runtime.Exit {
		return runtime.Exit{Code: -1, Err: &runtime.Error{Reason: "Kiln lost track of the container (the container engine stopped answering)",
			Err: fmt.Errorf("lost the container: %w", err)}}
	}
	if err := c.d.awaitEngine(wctx); err != nil {
		if wctx.Err() != nil {
			return wait, nil, exit, true
		}
		return wait, nil, lost(fmt.Errorf("%w; then %w", cause, err)), false
	}
	res, err := c.d.cli.ContainerInspect(wctx, c.id, client.ContainerInspectOptions{})
	switch {
	case wctx.Err() != nil:
		return wait, nil, exit, true
	case cerrdefs.IsNotFound(err):
		log.Warn("the container engine is back; the container is gone")
		return wait, nil, runtime.Exit{Code: -1, Err: &runtime.Error{Reason: "the server's container was removed while the container engine was away",
			Err: fmt.Errorf("container %s: %w", c.id, err)}}, false
	case err != nil:
		return wait, nil, lost(fmt.Errorf("inspect after the engine came back: %w", err)), false
	case res.Container.State == nil || !res.Container.State.Running:
		code := 0
		if res.Container.State != nil {
			code = res.Container.State.ExitCode
		}
		log.Warn("the container engine is back; the container ended while it was away", "exit_code", code)
		c.console("[kiln] the container engine is back; the server's container ended while it was away")
		return wait, nil, c.exitOf(container.WaitResponse{StatusCode: int64(code)}), false
	}
	hj, wait, err := c.d.stream(wctx, wctx, c.cancel, c.id, container.WaitConditionNotRunning)
	if err != nil {
		if wctx.Err() != nil {
			return wait, nil, exit, true
		}
		return wait, nil, lost(fmt.Errorf("re-attach after the engine came back: %w", err)), false
	}
	c.mu.Lock()
	c.hj = hj
	sent := c.sent
	c.mu.Unlock()
	log.Info("the container engine is back; re-attached to the running container")
	c.console("[kiln] the container engine is back; the server still runs")
	if sent != 0 {
		if err := c.signal(sent); err != nil {
			log.Warn("send again a signal the engine missed", "signal", sent.String(), "err", err)
		}
	}
	return wait, c.copyOut(hj), exit, false
}

// exitOf turns the engine's exit status into a runtime.Exit. The engine
// reports 128+N when the main process died of signal N; that is told as
// the signal when Kiln sent it (Stop, Kill) or, for a SIGKILL, when inspect
// says the OOM killer struck; as the plain code otherwise (a program may
// exit 143 itself).
func (c *Container) exitOf(r container.WaitResponse) runtime.Exit {
	if r.Error != nil && r.Error.Message != "" {
		return runtime.Exit{Code: -1, Err: &runtime.Error{Reason: "the container engine failed to report how the container ended",
			Err: errors.New(r.Error.Message)}}
	}
	code := int(r.StatusCode)
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	c.mu.Lock()
	sent := c.sent
	c.mu.Unlock()
	if code == 128+int(syscall.SIGKILL) {
		// The engine records the OOM kill from containerd's oom event, which
		// may arrive after the exit (containerd/containerd#8180, seen here on
		// a busy host): a SIGKILL Kiln did not send is asked about again for
		// up to a second before it is told as a plain 137.
		tries := 1
		if sent != syscall.SIGKILL {
			tries = 10
		}
		for n := range tries {
			res, err := c.d.cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
			if err == nil && res.Container.State != nil && res.Container.State.OOMKilled {
				return runtime.Exit{Code: -1, Signal: syscall.SIGKILL.String() + " (out of memory)"}
			}
			if err != nil || n == tries-1 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if sent != 0 && code == 128+int(sent) {
		return runtime.Exit{Code: -1, Signal: sent.String()}
	}
	return runtime.Exit{Code: code}
}

// Detach lets go of the container without stopping it, as kiln does when
// it shuts down: the console stream is closed and the exit watcher ends.
// Done is not closed by a Detach (the container still runs); the next
// kiln re-attaches with Adopt. Detach returns when the goroutines have.
func (c *Container) Detach() {
	c.cancel()
	c.closeStream()
	<-c.stopped
}

// Ref implements runtime.Instance: the container id.
func (c *Container) Ref() string { return c.id }

// WriteLine implements runtime.Instance: it writes line and a newline to
// the container's stdin.
func (c *Container) WriteLine(line string) error {
	select {
	case <-c.done:
		return errors.New("the server container has ended")
	default:
	}
	if strings.ContainsAny(line, "\r\n") {
		return errors.New("a console command must be a single line")
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	conn := c.stream().Conn
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return fmt.Errorf("write to console: %w", err)
	}
	return nil
}

// Stop implements runtime.Instance: SIGTERM to the container.
func (c *Container) Stop() error { return c.signal(syscall.SIGTERM) }

// Kill implements runtime.Instance: SIGKILL to the container.
func (c *Container) Kill() error { return c.signal(syscall.SIGKILL) }

func (c *Container) signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	c.mu.Lock()
	c.sent = sig
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"}[sig]
	_, err := c.d.cli.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: name})
	// Not found or conflict ("is not running"): it ended meanwhile.
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("signal %s: %w", name, err)
	}
	return nil
}

// Done implements runtime.Instance.
func (c *Container) Done() <-chan struct{} { return c.done }

// Exit implements runtime.Instance.
func (c *Container) Exit() runtime.Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exit
}

// Stats implements runtime.Instance with a one-shot sample of the engine
// (no stream, no second sample: it returns at once). CPU is the percent of
// one core used since the previous call, 0 on the first; see cpuPercent.
// Memory is the usage without the inactive file cache; see memoryBytes.
func (c *Container) Stats(ctx context.Context) (runtime.Stats, error) {
	select {
	case <-c.done:
		return runtime.Stats{}, nil
	default:
	}
	res, err := c.d.cli.ContainerStats(ctx, c.id, client.ContainerStatsOptions{})
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("container stats: %w", err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return runtime.Stats{}, fmt.Errorf("decode container stats: %w", err)
	}
	cur := sampleOf(s.CPUStats, s.Read)
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.prev
	if prev.read.IsZero() && s.PreCPUStats.SystemUsage != 0 {
		prev = sampleOf(s.PreCPUStats, s.PreRead)
	}
	c.prev = cur
	return runtime.Stats{CPU: cpuPercent(prev, cur), MemoryBytes: memoryBytes(s.MemoryStats)}, nil
}

// cpuSample is the cumulative CPU counters of one stats reading.
type cpuSample struct {
	total  uint64 // CPU time of the container, ns
	system uint64 // CPU time of the whole host (all CPUs), ns
	online uint32 // CPUs of the host
	read   time.Time
}

func sampleOf(s container.CPUStats, read time.Time) cpuSample {
	online := s.OnlineCPUs
	if online == 0 {
		online = uint32(len(s.CPUUsage.PercpuUsage))
	}
	return cpuSample{total: s.CPUUsage.TotalUsage, system: s.SystemUsage, online: online, read: read}
}

// cpuPercent is the `docker stats` formula,
//
//	Δcontainer CPU time / Δhost CPU time (all CPUs) × online CPUs × 100,
//
// i.e. the percent of one core (Δhost/online is the elapsed time), so 250
// means two and a half cores busy. Without host counters it falls back to
// Δcontainer CPU time / Δwall-clock time between the readings × 100.
func cpuPercent(prev, cur cpuSample) float64 {
	if prev.read.IsZero() && prev.system == 0 || cur.total < prev.total {
		return 0
	}
	used := float64(cur.total - prev.total)
	if cur.system > prev.system && cur.online > 0 {
		return used / float64(cur.system-prev.system) * float64(cur.online) * 100
	}
	if dt := cur.read.Sub(prev.read); dt > 0 {
		return used / float64(dt.Nanoseconds()) * 100
	}
	return 0
}

// memoryBytes is the memory usage minus the inactive file cache, as
// `docker stats` shows it: total_inactive_file on cgroup v1, inactive_file
// on v2. Only that part of the cache can be reclaimed; active page cache
// and tmpfs (/tmp) count against the limit and so stay in the figure.
func memoryBytes(m container.MemoryStats) int64 {
	u := m.Usage
	if v, ok := m.Stats["total_inactive_file"]; ok && v < u {
		u -= v
	} else if v, ok := m.Stats["inactive_file"]; ok && v < u {
		u -= v
	}
	return int64(u)
}
