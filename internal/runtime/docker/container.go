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
	d  *Docker
	id string
	hj client.HijackedResponse

	cancel  context.CancelFunc // ends the exit watcher: Detach
	done    chan struct{}      // the container has ended
	stopped chan struct{}      // the goroutines have returned (ended or detached)

	wmu sync.Mutex // one console write at a time

	mu   sync.Mutex
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
	hj, err := d.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach console: %w", err)
	}
	// The wait outlives ctx (a request's); ctx only bounds its set-up.
	wctx, cancel := context.WithCancel(context.Background())
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
		cancel()
		hj.Close()
		return nil, fmt.Errorf("wait for container: %w", err)
	}
	c := &Container{
		d: d, id: id, hj: hj.HijackedResponse,
		cancel: cancel, done: make(chan struct{}), stopped: make(chan struct{}),
	}
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		out, errOut := newLineWriter(console), newLineWriter(console)
		// The copy ends when the container's streams close (it exited) or
		// the connection is closed (Detach); either way nothing is left.
		_, _ = stdcopy.StdCopy(out, errOut, c.hj.Reader)
		out.Flush()
		errOut.Flush()
	}()
	d.track(c)
	go c.watch(wctx, wait, outDone)
	return c, nil
}

// watch waits for the container to end, lets the console drain and records
// how it ended. After a Detach it returns without doing so.
func (c *Container) watch(wctx context.Context, wait client.ContainerWaitResult, outDone <-chan struct{}) {
	defer close(c.stopped)
	defer c.d.forget(c)
	var exit runtime.Exit
	select {
	case r := <-wait.Result:
		exit = c.exitOf(r)
	case err := <-wait.Error:
		if wctx.Err() != nil { // Detach
			c.hj.Close()
			<-outDone
			return
		}
		exit = runtime.Exit{Code: -1, Err: &runtime.Error{Reason: "Kiln lost track of the container (the container engine stopped answering)",
			Err: fmt.Errorf("lost the container: %w", err)}}
	}
	t := time.NewTimer(drainTimeout)
	select {
	case <-outDone:
	case <-t.C:
	}
	t.Stop()
	c.hj.Close()
	<-outDone
	c.mu.Lock()
	c.exit = exit
	c.mu.Unlock()
	close(c.done)
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
	c.hj.Close()
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
	_ = c.hj.Conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := io.WriteString(c.hj.Conn, line+"\n"); err != nil {
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
