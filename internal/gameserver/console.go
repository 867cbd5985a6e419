package gameserver

import (
	"errors"
	"sync"
)

// consoleLines is how many lines a server's console keeps (api.md §3).
const consoleLines = 2000

// MaxStreams is how many subscribers one server's console has at most:
// each holds a 512-event buffer and a connection, and a page that leaks
// streams (a dashboard reopened in a loop) must not pile them up.
const MaxStreams = 32

// ErrTooManyStreams: the server's console already has MaxStreams
// subscribers.
var ErrTooManyStreams = errors.New("the server's console already has the most streams it allows")

// Event is one item of a console stream: a console line or a status change.
type Event struct {
	Kind string // "line" or "status"
	Data string
}

// console is a ring buffer of a server's last lines plus the streams that
// follow it. A subscriber that cannot keep up is dropped (its channel is
// closed) rather than slowing the server's output.
type console struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
	subs  map[chan Event]struct{}
}

func newConsole() *console {
	return &console{subs: map[chan Event]struct{}{}}
}

func (c *console) add(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines == nil {
		c.lines = make([]string, consoleLines)
	}
	c.lines[c.next] = line
	c.next = (c.next + 1) % consoleLines
	if c.next == 0 {
		c.full = true
	}
	c.publish(Event{Kind: "line", Data: line})
}

func (c *console) status(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publish(Event{Kind: "status", Data: s})
}

// publish must be called with c.mu held.
func (c *console) publish(e Event) {
	for ch := range c.subs {
		select {
		case ch <- e:
		default:
			delete(c.subs, ch)
			close(ch)
		}
	}
}

// end tells subscribers a last status and closes their channels: the
// server is gone.
func (c *console) end(last string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.subs {
		select {
		case ch <- Event{Kind: "status", Data: last}:
		default:
		}
		delete(c.subs, ch)
		close(ch)
	}
}

// tail returns the last n lines, oldest first.
func (c *console) tail(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := c.next
	if c.full {
		size = consoleLines
	}
	n = min(n, size)
	out := make([]string, 0, n)
	for i := size - n; i < size; i++ {
		idx := i
		if c.full {
			idx = (c.next + i) % consoleLines
		}
		out = append(out, c.lines[idx])
	}
	return out
}

// subscribe returns a channel of events and a function that ends the
// subscription. The channel is closed when the subscriber falls behind.
// It returns ErrTooManyStreams when MaxStreams are subscribed.
func (c *console) subscribe() (<-chan Event, func(), error) {
	c.mu.Lock()
	if len(c.subs) >= MaxStreams {
		c.mu.Unlock()
		return nil, nil, ErrTooManyStreams
	}
	ch := make(chan Event, 512)
	c.subs[ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.subs[ch]; ok {
			delete(c.subs, ch)
			close(ch)
		}
	}, nil
}
