package quota

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Errors a writer tells apart.
var (
	// ErrQuota: the write would pass the server's disk limit.
	ErrQuota = errors.New("the server's disk limit would be exceeded")
	// ErrDiskFull: the host's disk (or the file system's own quota) is
	// full, whatever the server's limit.
	ErrDiskFull = errors.New("the host's disk is full")
)

// IsDiskFull reports whether err is the host's disk being full (ENOSPC or
// EDQUOT anywhere in its chain, or ErrDiskFull).
func IsDiskFull(err error) bool {
	return errors.Is(err, ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// BlockSize is the unit entries are charged in.
const BlockSize = 4096

// Cost is what a regular file of size bytes is charged: its size rounded
// up to a block, at least one block (an inode costs something).
func Cost(size int64) int64 {
	if size <= BlockSize {
		return BlockSize
	}
	return (size + BlockSize - 1) / BlockSize * BlockSize
}

// EntryCost is what a directory, a symlink or any entry other than a
// regular file is charged.
const EntryCost = BlockSize

// Account is one server's ledger. Its methods are safe for concurrent use.
type Account struct {
	mu       sync.Mutex
	limit    int64
	used     int64 // charged bytes in the root: the last walk plus commits since
	reserved int64 // bytes held by writers in flight
	writers  int   // reservations not yet ended (Reserve, then Commit or Release)
	hold     *Hold // when set, only it makes new reservations (Hold)
	walking  bool
	walkAdd  int64          // commits during the walk in progress
	staled   bool           // Stale was called during the walk in progress
	walkedAt time.Time      // when the last walk ended; zero: never walked, or stale
	inflight map[fileID]int // temporary entries of writers in flight (Track)
	batches  uint64         // begins and ends of batches (Batch)
	batching int            // batches begun and not ended
	walk     sync.Mutex
	names    TempNames // Kiln's temporary names in this root
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// NewAccount returns an account with a limit of limit bytes, never
// walked, whose writers name their temporary entries with names.
func NewAccount(limit int64, names TempNames) *Account {
	return &Account{limit: limit, names: names}
}

// Names are the account's temporary names: what its writers mint, and
// what its walks recognise as Kiln's.
func (a *Account) Names() TempNames { return a.names }

// Names are the temporary names of the reservation's account (zero for
// a nil reservation).
func (r *Reservation) Names() TempNames {
	if r == nil {
		return TempNames{}
	}
	return r.a.names
}

// TempName is names.Name(body) of the reservation's account: the name of
// a temporary entry of this operation. A nil reservation (Kiln's own
// writes outside any root) mints keyless names, which no walk removes.
func (r *Reservation) TempName(body string) string {
	if r == nil {
		return TempNames{}.Name(body)
	}
	return r.a.names.Name(body)
}

// SetLimit changes the limit (a server's disk_mb was updated).
func (a *Account) SetLimit(limit int64) {
	a.mu.Lock()
	a.limit = limit
	a.mu.Unlock()
}

// Figures is a consistent reading of an account.
type Figures struct {
	Limit    int64
	Used     int64 // committed bytes
	Reserved int64 // bytes held by writers in flight
	Writers  int   // writers in flight: reservations made and not yet ended
	WalkedAt time.Time
}

// Free is what may still be reserved; never negative.
func (f Figures) Free() int64 { return max(0, f.Limit-f.Used-f.Reserved) }

// Figures reads the account.
func (a *Account) Figures() Figures {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Figures{Limit: a.limit, Used: a.used, Reserved: a.reserved, Writers: a.writers, WalkedAt: a.walkedAt}
}

// Stale makes the next Walked report a zero time: the figure should be
// measured again before it is trusted (after an operation whose effect on
// the size is not known, such as deleting a directory).
func (a *Account) Stale() {
	a.mu.Lock()
	a.walkedAt = time.Time{}
	if a.walking {
		a.staled = true // the walk may have seen the tree before the change
	}
	a.mu.Unlock()
}

// Adjust records a change of delta bytes that was not reserved: a
// deletion (negative) or a change measured after the fact.
func (a *Account) Adjust(delta int64) {
	a.mu.Lock()
	a.commitLocked(delta)
	a.mu.Unlock()
}

func (a *Account) commitLocked(delta int64) {
	a.used = max(0, a.used+delta)
	if a.walking {
		a.walkAdd += delta
	}
}

// Batches is the account's count of batches (Reservation.Batch): how
// many began or ended, and how many are under way. A reader of the whole
// root that saw count change while it read may hold some of a batch's
// entries and not the others.
func (a *Account) Batches() (count uint64, open int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.batches, a.batching
}

// ErrHeld refuses a new reservation while the account is held for one
// writer (Hold): a snapshot restore replacing the root.
var ErrHeld = errors.New("quota: the root is held by another writer")

// Hold is an account held for one writer: until Release, Reserve refuses
// every other new reservation with ErrHeld (those made before go on:
// Figures.Writers says how many), and the holder reserves through it.
type Hold struct{ a *Account }

// Hold holds the account for the caller; ok is false when it is held
// already.
func (a *Account) Hold() (h *Hold, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold != nil {
		return nil, false
	}
	a.hold = &Hold{a: a}
	return a.hold, true
}

// Held tells whether the account is held (Hold).
func (a *Account) Held() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hold != nil
}

// Release ends the hold; later calls do nothing.
func (h *Hold) Release() {
	h.a.mu.Lock()
	if h.a.hold == h {
		h.a.hold = nil
	}
	h.a.mu.Unlock()
}

// Reserve is Account.Reserve for the holder (ErrHeld once released).
func (h *Hold) Reserve(n int64) (*Reservation, error) { return h.a.reserve(h, n) }

// Reserve starts a reservation holding n bytes (n may be 0: a writer that
// grows as it writes). Errors: ErrQuota, ErrHeld.
func (a *Account) Reserve(n int64) (*Reservation, error) { return a.reserve(nil, n) }

func (a *Account) reserve(by *Hold, n int64) (*Reservation, error) {
	a.mu.Lock()
	if a.hold != by {
		a.mu.Unlock()
		return nil, ErrHeld
	}
	a.writers++ // counted before it can grow: a writer is never unseen
	a.mu.Unlock()
	r := &Reservation{a: a}
	if err := r.Grow(n); err != nil {
		a.mu.Lock()
		a.writers--
		a.mu.Unlock()
		return nil, err
	}
	return r, nil
}

// Reservation is bytes one operation holds against an account until it
// commits or releases them. Grow, Changed and Track may be called from
// several goroutines of the operation at once; Commit or Release once,
// when the writers are done (a second call does nothing). A nil
// *Reservation is no limit at all (Grow always succeeds): for Kiln's own
// writes outside any server's root.
type Reservation struct {
	a       *Account
	mu      sync.Mutex
	held    int64
	change  int64 // what the operation changed in the root so far (Changed)
	done    bool
	tracked []fileID
}

// Track tells walks that the temporary entry open as fd (a TempPrefix
// file or staging directory) is this reservation's: its bytes are held
// here, so a walk does not count them, until Commit or Release. An
// untracked temporary entry is counted like any other (a game server
// cannot hide bytes behind the prefix).
func (r *Reservation) Track(fd int) error {
	if r == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("quota: track: %w", err)
	}
	id := fileID{st.Dev, st.Ino}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return errors.New("quota: track after commit or release")
	}
	r.tracked = append(r.tracked, id)
	a := r.a
	a.mu.Lock()
	if a.inflight == nil {
		a.inflight = map[fileID]int{}
	}
	a.inflight[id]++
	a.mu.Unlock()
	return nil
}

// untrackLocked forgets r's temporary entries; a.mu is held.
func (r *Reservation) untrackLocked() {
	for _, id := range r.tracked {
		if n := r.a.inflight[id]; n <= 1 {
			delete(r.a.inflight, id)
		} else {
			r.a.inflight[id] = n - 1
		}
	}
	r.tracked = nil
}

// inFlight reports whether a walk should leave the entry out.
func (a *Account) inFlight(dev, ino uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight[fileID{dev, ino}] > 0
}

// Grow holds n more bytes, or fails with ErrQuota and holds nothing more
// when the account cannot give them.
func (r *Reservation) Grow(n int64) error {
	if n <= 0 || r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return errors.New("quota: grow after commit or release")
	}
	a := r.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used+a.reserved+n > a.limit {
		return ErrQuota
	}
	a.reserved += n
	r.held += n
	return nil
}

// Shrink gives back n of the bytes held (a writer removed a partial
// file; the operation goes on).
func (r *Reservation) Shrink(n int64) {
	if r == nil || n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	n = min(n, r.held)
	r.a.mu.Lock()
	r.a.reserved -= n
	r.a.mu.Unlock()
	r.held -= n
}

// Free is what the account could still give this reservation now (a
// first check against a claimed size; the limit is enforced by Grow).
// A nil reservation has no limit.
func (r *Reservation) Free() int64 {
	if r == nil {
		return math.MaxInt64
	}
	return r.a.Figures().Free()
}

// Held is what the reservation holds.
func (r *Reservation) Held() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Changed records that the operation changed the root by delta bytes
// (a file it put in place: its cost less what it replaced). It may be
// less than what was held, or negative.
func (r *Reservation) Changed(delta int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.change += delta
	r.mu.Unlock()
}

// Change is what Changed recorded so far.
func (r *Reservation) Change() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change
}

// Batch marks the start of a batch: many entries moved into the root
// one after another that belong together (a staged tree committed, such
// as a modpack or an extracted archive; each move is atomic, the batch
// is not). The returned end marks its end; later calls of it do nothing.
// Both are counted (Account.Batches). A nil *Reservation counts nothing.
func (r *Reservation) Batch() (end func()) {
	if r == nil {
		return func() {}
	}
	a := r.a
	a.mu.Lock()
	a.batches++
	a.batching++
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.batches++
			a.batching--
			a.mu.Unlock()
		})
	}
}

// Commit ends the reservation: what Changed recorded becomes used, the
// rest of what was held is released.
func (r *Reservation) Commit() { r.end(true) }

// Release ends the reservation and commits nothing: the operation removed
// whatever it wrote (what Changed recorded is dropped).
func (r *Reservation) Release() { r.end(false) }

// end gives back what r holds, committing its change with commit; a
// second end does nothing.
func (r *Reservation) end(commit bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	a := r.a
	a.mu.Lock()
	a.reserved -= r.held
	a.writers--
	if commit {
		a.commitLocked(r.change)
	}
	r.untrackLocked()
	a.mu.Unlock()
	r.held = 0
}

// Writer is a reservation spent as bytes are written into one regular
// file: before a write it holds what the file will cost with those bytes
// (Cost), less a credit (the cost of a file being replaced).
type Writer struct {
	Res    *Reservation
	Credit int64 // cost of the file being replaced
	n      int64 // bytes written
	cost   int64 // held for this file so far
	begun  bool  // Reserve was called
}

// Reserve holds what the file costs with n more bytes. Errors: ErrQuota.
func (w *Writer) Reserve(n int64) error {
	want := Cost(w.n+n) - w.Credit
	if !w.begun && want <= w.cost {
		w.begun = true
	}
	if want <= w.cost {
		w.n += n
		return nil
	}
	if err := w.Res.Grow(want - w.cost); err != nil {
		return err
	}
	w.cost, w.begun = want, true
	w.n += n
	return nil
}

// Abandon gives back what was held for the file (its writer removed it).
func (w *Writer) Abandon() {
	w.Res.Shrink(w.cost)
	w.cost, w.n, w.begun = 0, 0, false
}

// Delta is what the file changed in the root once written: its cost less
// the credit (0 if nothing was ever reserved for it).
func (w *Writer) Delta() int64 {
	if !w.begun {
		return 0
	}
	return Cost(w.n) - w.Credit
}
