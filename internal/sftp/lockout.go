package sftp

import (
	"sync"
	"time"
)

// lockout counts failed logins per client address: Failures within
// Window lock the address out for LockFor (every login from it is
// refused meanwhile, right password or not).
type lockout struct {
	failures int
	window   time.Duration
	lockFor  time.Duration

	mu    sync.Mutex
	addrs map[string]*addrState
}

type addrState struct {
	fails  []time.Time // the recent failures, oldest first (at most failures)
	lockTo time.Time   // zero: not locked
}

// maxTrackedAddrs bounds the addresses remembered: beyond it, addresses
// with nothing recent are dropped first, then the table is cleared
// (a flood of addresses must not grow memory without end).
const maxTrackedAddrs = 100_000

func newLockout(failures int, window, lockFor time.Duration) *lockout {
	return &lockout{failures: failures, window: window, lockFor: lockFor, addrs: map[string]*addrState{}}
}

// locked reports whether addr is locked out at now.
func (l *lockout) locked(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.addrs[addr]
	return st != nil && now.Before(st.lockTo)
}

// fail records a failed login from addr at now and reports whether it
// locked the address out.
func (l *lockout) fail(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.addrs[addr]
	if st == nil {
		if len(l.addrs) >= maxTrackedAddrs {
			l.pruneLocked(now)
		}
		st = &addrState{}
		l.addrs[addr] = st
	}
	if now.Before(st.lockTo) {
		return false
	}
	keep := st.fails[:0]
	for _, t := range st.fails {
		if now.Sub(t) < l.window {
			keep = append(keep, t)
		}
	}
	st.fails = append(keep, now)
	if len(st.fails) >= l.failures {
		st.fails = st.fails[:0]
		st.lockTo = now.Add(l.lockFor)
		return true
	}
	return false
}

// pruneLocked drops addresses with no recent failure and no lock; if
// that frees nothing, everything.
func (l *lockout) pruneLocked(now time.Time) {
	for a, st := range l.addrs {
		recent := len(st.fails) > 0 && now.Sub(st.fails[len(st.fails)-1]) < l.window
		if !recent && !now.Before(st.lockTo) {
			delete(l.addrs, a)
		}
	}
	if len(l.addrs) >= maxTrackedAddrs {
		clear(l.addrs)
	}
}
