package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ListeningPorts lists the ports of r that a TCP socket of this host's
// network namespace listens on (any address, IPv4 or IPv6), read from
// /proc/net/tcp and /proc/net/tcp6: a game server cannot take those.
// Reading the kernel's tables, rather than trying to bind each port,
// never takes a port from under a server that is starting.
func ListeningPorts(r PortRange) ([]int, error) {
	seen := map[int]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) && name == "/proc/net/tcp6" {
			continue // IPv6 off
		}
		if err != nil {
			return nil, fmt.Errorf("read listening ports: %w", err)
		}
		err = listening(f, r, seen)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// listening adds to seen the ports of r in LISTEN state (st 0A) in a
// /proc/net/tcp table.
func listening(rd io.Reader, r PortRange, seen map[int]bool) error {
	sc := bufio.NewScanner(rd)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		if port := int(p); port >= r.First && port <= r.Last {
			seen[port] = true
		}
	}
	return sc.Err()
}
