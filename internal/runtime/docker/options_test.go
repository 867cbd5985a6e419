package docker

import (
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/kilnhq/kiln/internal/runtime"
)

func TestParseUser(t *testing.T) {
	self := strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", self, true},
		{"1000:1000", "1000:1000", true},
		{"0:0", "0:0", true},
		{"1000", "", false}, // the group would silently be 0
		{"minecraft:minecraft", "", false},
		{"1000:", "", false},
		{"-1:5", "", false},
	} {
		got, err := parseUser(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("parseUser(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestBindAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "invalid IP", true}, // the zero Addr: every interface
		{"127.0.0.1", "127.0.0.1", true},
		{"localhost", "127.0.0.1", true},
		{"::1", "::1", true},
		{"[::1]", "::1", true},
		{"::ffff:10.0.0.1", "10.0.0.1", true},
		{"play.example.com", "", false},
	} {
		got, err := bindAddr(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got.String() != tc.want) {
			t.Errorf("bindAddr(%q) = %v, %v; want %s, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if a, _ := bindAddr(""); a != (netip.Addr{}) {
		t.Errorf("bindAddr(\"\") = %v, want the zero Addr", a)
	}
}

func TestCreateOptionsRefuses(t *testing.T) {
	d := &Docker{user: "1000:1000", pidsLimit: DefaultPidsLimit}
	good := runtime.Spec{ServerID: "s1", Root: "/srv/kiln/s1", Image: "img", Argv: []string{"java"}, Port: 25565, MemoryMB: 1024}
	if _, err := d.createOptions(good); err != nil {
		t.Fatalf("createOptions(good) = %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*runtime.Spec)
		want   string
	}{
		{"no id", func(s *runtime.Spec) { s.ServerID = "" }, "no server id"},
		{"no image", func(s *runtime.Spec) { s.Image = "" }, "no container image"},
		{"no command", func(s *runtime.Spec) { s.Argv = nil }, "empty command"},
		{"relative root", func(s *runtime.Spec) { s.Root = "srv/s1" }, "not an absolute path"},
		{"negative port", func(s *runtime.Spec) { s.Port = -1 }, "out of range"},
		{"port too big", func(s *runtime.Spec) { s.Port = 70000 }, "out of range"},
		{"negative memory", func(s *runtime.Spec) { s.MemoryMB = -1 }, "negative"},
		{"host name", func(s *runtime.Spec) { s.BindHost = "play.example.com" }, "not an IP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			tc.change(&spec)
			if _, err := d.createOptions(spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("createOptions = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCreateOptionsUnlimited(t *testing.T) {
	d := &Docker{user: "1000:1000", pidsLimit: DefaultPidsLimit}
	o, err := d.createOptions(runtime.Spec{ServerID: "s1", Root: "/r", Image: "img", Argv: []string{"x"}, Port: 25565})
	if err != nil {
		t.Fatal(err)
	}
	r := o.HostConfig.Resources
	if r.Memory != 0 || r.MemorySwap != 0 || r.CPUQuota != 0 || r.CPUPeriod != 0 || *r.PidsLimit != DefaultPidsLimit {
		t.Errorf("resources with no limits = %+v, want only the pids limit", r)
	}
}

// TestCreateOptionsNoPort: port 0 (an installer run) publishes and
// exposes nothing.
func TestCreateOptionsNoPort(t *testing.T) {
	d := &Docker{user: "1000:1000", pidsLimit: DefaultPidsLimit}
	o, err := d.createOptions(runtime.Spec{ServerID: "install-1", Root: "/r", Image: "img", Argv: []string{"java"}, MemoryMB: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Config.ExposedPorts) != 0 || len(o.HostConfig.PortBindings) != 0 {
		t.Errorf("port 0: exposed %v, bindings %v; want none", o.Config.ExposedPorts, o.HostConfig.PortBindings)
	}
	if !o.HostConfig.ReadonlyRootfs || len(o.HostConfig.CapDrop) != 1 || o.HostConfig.Mounts[0].Source != "/r" {
		t.Errorf("port 0 lost the hardening or the mount: %+v", o.HostConfig)
	}
}

func TestCPUPercent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		prev, cur cpuSample
		want      float64
	}{
		{"no previous sample", cpuSample{}, cpuSample{total: 5e9, system: 100e9, online: 4, read: t0}, 0},
		// 0.5 s of CPU while the 4-CPU host ran 4 s (1 s of wall time): half a core.
		{"half a core", cpuSample{total: 1e9, system: 10e9, online: 4, read: t0}, cpuSample{total: 1.5e9, system: 14e9, online: 4, read: t0.Add(time.Second)}, 50},
		{"two cores", cpuSample{total: 0, system: 10e9, online: 4, read: t0}, cpuSample{total: 2e9, system: 14e9, online: 4, read: t0.Add(time.Second)}, 200},
		{"no host counters", cpuSample{total: 1e9, read: t0}, cpuSample{total: 1.25e9, read: t0.Add(time.Second)}, 25},
		{"counter reset", cpuSample{total: 9e9, system: 10e9, online: 1, read: t0}, cpuSample{total: 1e9, system: 11e9, online: 1, read: t0.Add(time.Second)}, 0},
		{"no time passed", cpuSample{total: 1e9, read: t0}, cpuSample{total: 2e9, read: t0}, 0},
	} {
		if got := cpuPercent(tc.prev, tc.cur); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: cpuPercent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMemoryBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   container.MemoryStats
		want int64
	}{
		{"cgroup v1", container.MemoryStats{Usage: 100, Stats: map[string]uint64{"total_inactive_file": 30, "cache": 60}}, 70},
		{"cgroup v2", container.MemoryStats{Usage: 100, Stats: map[string]uint64{"inactive_file": 40}}, 60},
		{"no stats", container.MemoryStats{Usage: 100}, 100},
		{"cache larger than usage", container.MemoryStats{Usage: 10, Stats: map[string]uint64{"total_inactive_file": 30}}, 10},
	} {
		if got := memoryBytes(tc.in); got != tc.want {
			t.Errorf("%s: memoryBytes = %d, want %d", tc.name, got, tc.want)
		}
	}
}
