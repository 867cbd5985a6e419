package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kilnhq/kiln/internal/runtime"
)

// PortRange is an inclusive range of game ports.
type PortRange struct{ First, Last int }

// ParsePortRange reads "25565-25664".
func ParsePortRange(s string) (PortRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || first < 1 || last > 65535 || first > last {
		return PortRange{}, fmt.Errorf("port range %q: want FIRST-LAST with 1 <= FIRST <= LAST <= 65535", s)
	}
	return PortRange{First: first, Last: last}, nil
}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Capacity is what a node has in total and free.
type Capacity struct {
	MemoryBytes     int64
	MemoryFreeBytes int64 // what the host could still give (MemAvailable)
	DiskBytes       int64
	DiskFreeBytes   int64
}

// Offer is what the operator says a node offers its servers
// (--node-memory, --node-disk), in bytes; 0 leaves the machine's.
type Offer struct {
	MemoryBytes int64
	DiskBytes   int64
}

// Apply is c as offered: a total the offer sets replaces the machine's,
// and the matching free figure is at most it.
func (o Offer) Apply(c Capacity) Capacity {
	if o.MemoryBytes > 0 {
		c.MemoryBytes = o.MemoryBytes
		c.MemoryFreeBytes = min(c.MemoryFreeBytes, o.MemoryBytes)
	}
	if o.DiskBytes > 0 {
		c.DiskBytes = o.DiskBytes
		c.DiskFreeBytes = min(c.DiskFreeBytes, o.DiskBytes)
	}
	return c
}

// Local is the machine kiln serve runs on.
type Local struct {
	name     string
	rootsDir string
	ports    PortRange
	rt       runtime.Runtime
	offer    Offer
}

// NewLocal describes this host; server roots go under rootsDir.
func NewLocal(name, rootsDir string, ports PortRange, rt runtime.Runtime) (*Local, error) {
	if err := os.MkdirAll(rootsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create server roots directory: %w", err)
	}
	abs, err := filepath.Abs(rootsDir)
	if err != nil {
		return nil, fmt.Errorf("server roots directory: %w", err)
	}
	return &Local{name: name, rootsDir: abs, ports: ports, rt: rt}, nil
}

// Name is the node's name, stored on each server.
func (n *Local) Name() string { return n.name }

// Root is the absolute directory of a server's files.
func (n *Local) Root(serverID string) string { return filepath.Join(n.rootsDir, serverID) }

// Ports are the game ports this node hands out.
func (n *Local) Ports() PortRange { return n.ports }

// Runtime starts servers on this node.
func (n *Local) Runtime() runtime.Runtime { return n.rt }

// SetOffer makes Capacity report o; call it before the node is used.
func (n *Local) SetOffer(o Offer) { n.offer = o }

// Capacity reads /proc/meminfo and statfs of the roots directory, as
// offered (SetOffer).
func (n *Local) Capacity(context.Context) (Capacity, error) {
	c, err := ReadCapacity(n.rootsDir)
	if err != nil {
		return c, err
	}
	return n.offer.Apply(c), nil
}

// ReadCapacity reads this host's memory (/proc/meminfo: MemTotal and
// MemAvailable) and the size and free space of the file system of dir
// (statfs; free is what an unprivileged writer may use).
func ReadCapacity(dir string) (Capacity, error) {
	var c Capacity
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return c, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	kB := func(rest string) int64 {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb * 1024
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			c.MemoryBytes = kB(rest)
		} else if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			c.MemoryFreeBytes = kB(rest)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return c, fmt.Errorf("read disk size: %w", err)
	}
	c.DiskBytes = int64(st.Blocks) * st.Bsize
	c.DiskFreeBytes = int64(st.Bavail) * st.Bsize
	return c, nil
}
