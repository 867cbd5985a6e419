package snapshot

import (
	"context"
	"slices"
	"sync"
)

// slots shares the snapshots taken at once by this process
// (Options.Parallel) between teams. Each team's snapshots wait in the
// order they were asked for; a free slot goes to the teams in turn (the
// team served last goes to the back of the line), and a team holding
// share slots gets no more while another team waits — share is half the
// slots, rounded up. A team alone uses them all. So one team's queue of
// snapshots (a retention script, a deployment replacing many servers)
// delays another team's snapshot by at most the time one of the
// snapshots being taken needs to end (none is stopped for it), not by
// the whole queue.
type slots struct {
	mu     sync.Mutex
	free   int
	share  int
	held   map[string]int           // slots held, by team
	queues map[string][]*slotWaiter // waiting, by team, first come first
	order  []string                 // teams with waiters, the next to serve first
}

type slotWaiter struct {
	team  string
	ready chan struct{} // closed when the slot is the waiter's
}

func newSlots(n int) *slots {
	return &slots{free: n, share: (n + 1) / 2, held: map[string]int{}, queues: map[string][]*slotWaiter{}}
}

// acquire waits for a slot for team (its turn, as the type says) and
// returns nil once it holds one, which release gives back; ctx's error if
// it ends first (then it holds none).
func (s *slots) acquire(ctx context.Context, team string) error {
	w := &slotWaiter{team: team, ready: make(chan struct{})}
	s.mu.Lock()
	if len(s.queues[team]) == 0 {
		s.order = append(s.order, team)
	}
	s.queues[team] = append(s.queues[team], w)
	s.dispatch()
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready:
		s.releaseLocked(team) // given meanwhile: the next one's
	default:
		q := slices.DeleteFunc(s.queues[team], func(o *slotWaiter) bool { return o == w })
		s.queues[team] = q
		if len(q) == 0 {
			delete(s.queues, team)
			s.order = slices.DeleteFunc(s.order, func(t string) bool { return t == team })
		}
	}
	return ctx.Err()
}

// release gives back a slot team held.
func (s *slots) release(team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(team)
}

func (s *slots) releaseLocked(team string) {
	s.free++
	if s.held[team]--; s.held[team] <= 0 {
		delete(s.held, team)
	}
	s.dispatch()
}

// dispatch gives the free slots to the waiters whose turn it is.
func (s *slots) dispatch() {
	for s.free > 0 {
		i := slices.IndexFunc(s.order, func(team string) bool {
			return s.held[team] < s.share || len(s.order) == 1
		})
		if i < 0 {
			return // none may take one (cannot happen with a free slot: share is half)
		}
		team := s.order[i]
		q := s.queues[team]
		w := q[0]
		s.order = slices.Delete(s.order, i, i+1)
		if len(q) == 1 {
			delete(s.queues, team)
		} else {
			q[0] = nil
			s.queues[team] = q[1:]
			s.order = append(s.order, team)
		}
		s.free--
		s.held[team]++
		close(w.ready)
	}
}
