package snapshot

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/panics"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/ignore"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("snapshot not found")
	// ErrNotReady: a restore or a download of a snapshot that is not
	// ready.
	ErrNotReady = errors.New("the snapshot is not ready; only a ready snapshot can be restored or downloaded")
	// ErrBusy: a restore of a server another restore is writing.
	ErrBusy = errors.New("a restore into this server is already running")
	// ErrServerDeleted: the server a restore was writing into was deleted;
	// the restore stopped (before its commit point: nothing of it left).
	ErrServerDeleted = errors.New("the server was deleted during the restore; the restore was cancelled")
	// ErrWritersBusy: writes into the server that began before the
	// restore did not end within Options.WriterWait; nothing was
	// restored.
	ErrWritersBusy = errors.New("writes into the server did not end")
	// ErrSourceDeleted: the server a snapshot was to be taken of was
	// being deleted when the snapshot started; nothing was stored.
	ErrSourceDeleted = errors.New("the server was being deleted when the snapshot was to be taken")
	// ErrSavesNotPaused: the saves of the running game server could not
	// be paused and flushed for the walk (its console could not be
	// followed); nothing was read.
	ErrSavesNotPaused = errors.New("the server's saves could not be paused for the snapshot, so nothing was read")
	// ErrServerUnsettled: the server was started or stopped, or a batch of
	// files moved into it, under every walk of its files (walkAttempts);
	// nothing consistent was read.
	ErrServerUnsettled = errors.New("the server was started or stopped, or files were installed or extracted into it, while its files were read, 3 times in a row; take the snapshot again once it is running or stopped and no install is under way")
)

// walkAttempts is how many walks a snapshot makes of a server whose
// status changes under them before it fails (ErrServerUnsettled).
const walkAttempts = 3

// Statuses of a snapshot.
const (
	StatusPending  = "pending"
	StatusCreating = "creating"
	StatusReady    = "ready"
	StatusFailed   = "failed"
)

// Limits of the request fields.
const (
	MaxName   = 100
	MaxIgnore = 64 << 10
	// MaxList is how many snapshots a page of a list holds at most, and
	// by default (newest first).
	MaxList = 1000
)

const (
	chunkPrefix    = "chunks/"
	manifestPrefix = "manifests/"
)

// Servers is what the service needs of internal/servers.
type Servers interface {
	Get(ctx context.Context, teamID, id string) (servers.Server, error)
	Access(ctx context.Context, teamID, id string, write bool) (servers.Access, error)
	Command(ctx context.Context, teamID, id, line string) error
	Stream(ctx context.Context, teamID, id string) (<-chan servers.Event, func(), error)
	Power(ctx context.Context, teamID, id, action string) error
	Hold(ctx context.Context, teamID, id string) (*servers.Held, error)
	Reading(ctx context.Context, teamID, id string) (*servers.Reader, error)
	Note(id, line string)
}

// Catalog tells a game server from a proxy (no world to save).
type Catalog interface {
	Get(typ string) (catalog.Profile, bool)
}

// Options tune a Service; zero values take the defaults.
type Options struct {
	// Owner is this process's instance id and Node its node: snapshots it
	// takes are tagged with the id; those of an instance that stopped
	// beating, or of an earlier instance of this node (the data dir's lock
	// says it is gone), are failed.
	Owner, Node string
	// Parallel bounds the snapshots taken at once by this process (2),
	// shared between teams in turn (slots.go).
	Parallel int
	// CollectEvery is the background collector's period (1 h); Grace is
	// how old a blob with no record must be before it goes (1 h).
	CollectEvery, Grace time.Duration
	// SaveTimeout bounds the wait for a running server's "save-all flush"
	// (60 s).
	SaveTimeout time.Duration
	// Now is the clock a snapshot's start is read from (what the next
	// snapshot of the server compares file changes with); nil is
	// time.Now. Tests move it.
	Now func() time.Time
	// Compression is how hard snapshots compress (engine.Compression;
	// "" is engine.CompressionFastest).
	Compression engine.Compression
	// WriterWait bounds a restore's wait for the writes in flight into
	// its server when the hold was taken (an upload, a download, an
	// install) to end before it replaces the files (DefaultWriterWait;
	// kiln serve --restore-writer-wait).
	WriterWait time.Duration
	// Dedup says which snapshots share chunks ("" is DedupTeam).
	Dedup Dedup
	// MaxExports bounds the snapshot downloads written at once by this
	// process (4): each holds up to 16 MiB of chunks fetched ahead and
	// its compressor's buffers (kiln serve's peak grows by 29 MiB for a
	// tar, 45 for a tar.zst, 57 for a tar.gz); one more is refused
	// (ErrExportsBusy).
	MaxExports int
}

// Dedup is the operator's choice of which snapshots share the chunks
// they hold in common (kiln serve --snapshot-dedup).
type Dedup string

const (
	// DedupTeam: the snapshots of one team share chunks; each team
	// stores its own (engine chunk space per team). What a snapshot
	// stores, and how long it takes, then depends on the team's own
	// snapshots only: a team cannot learn whether another team holds
	// some content. The default.
	DedupTeam Dedup = "team"
	// DedupGlobal: every snapshot in the blob store shares chunks
	// (engine's shared space): two teams running the same server jar
	// store it once, and a snapshot's stored_bytes (and a delete's
	// freed_bytes and shared_bytes) then tell its team whether content it
	// holds is in the store already, anyone's.
	DedupGlobal Dedup = "global"
)

// ParseDedup returns the Dedup named s (case-insensitive; "" is
// DedupTeam).
func ParseDedup(s string) (Dedup, error) {
	switch strings.ToLower(s) {
	case "", string(DedupTeam):
		return DedupTeam, nil
	case string(DedupGlobal):
		return DedupGlobal, nil
	}
	return "", fmt.Errorf("snapshot dedup %q: want team or global", s)
}

// chunkSpace is the engine chunk space team's snapshots store their
// chunks in: the shared one ("") under DedupGlobal, else the team's own,
// named by the hex of its id (ids are "team_" and 20 base62 characters:
// 50 hex digits; hex, because blob keys are lower case and base62 is
// not); an id too long for a space name (none Kiln makes) is named by
// the first half of its SHA-256 after an 'h', which no hex name holds.
func (o Options) chunkSpace(teamID string) string {
	if o.Dedup == DedupGlobal {
		return ""
	}
	if name := hex.EncodeToString([]byte(teamID)); len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(teamID))
	return "h" + hex.EncodeToString(sum[:16])
}

// DefaultWriterWait is Options.WriterWait's default: a minute, long
// enough for an API upload of a few hundred MB or a mod install to end,
// short enough that a restore asked for does not seem to hang.
const DefaultWriterWait = time.Minute

func (o *Options) defaults() {
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.CollectEvery <= 0 {
		o.CollectEvery = time.Hour
	}
	if o.Grace <= 0 {
		o.Grace = time.Hour
	}
	if o.SaveTimeout <= 0 {
		o.SaveTimeout = 60 * time.Second
	}
	if o.WriterWait <= 0 {
		o.WriterWait = DefaultWriterWait
	}
	if o.MaxExports <= 0 {
		o.MaxExports = 4
	}
}

// Service owns snapshot records and takes, restores and deletes snapshots
// in the background.
type Service struct {
	db      *store.DB
	store   blob.Store
	servers Servers
	cat     Catalog
	log     *slog.Logger
	opts    Options

	slots   *slots        // the snapshots taken at once, shared between teams (slots.go)
	exports chan struct{} // one per download being written (Export)

	mu        sync.Mutex
	running   map[string]context.CancelFunc  // snapshots being taken here, by id
	restoring map[string]*restoreRun         // servers being restored, by id
	taking    map[string]map[string]struct{} // snapshots being taken here, by server id (beginTake)
	deleted   map[string]bool                // servers being deleted, by id (ServerDeleting to DeleteEnded)
	ctx       context.Context                // ends at Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	wake      chan struct{}

	// finishedRestores: the servers whose interrupted restore this
	// node's start finished (RootsRecovered), for their records.
	finishedRestores map[string]bool
	closed           bool // Close waits on wg: goTracked starts nothing more
}

// New returns a Service; Run starts its collector, Close stops it.
func New(db *store.DB, st blob.Store, srv Servers, cat Catalog, opts Options, log *slog.Logger) *Service {
	opts.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{db: db, store: st, servers: srv, cat: cat, log: log, opts: opts,
		slots: newSlots(opts.Parallel), exports: make(chan struct{}, opts.MaxExports), running: map[string]context.CancelFunc{}, restoring: map[string]*restoreRun{},
		taking:  map[string]map[string]struct{}{},
		deleted: map[string]bool{},
		ctx:     ctx, cancel: cancel, wake: make(chan struct{}, 1)}
}

// Snapshot is a snapshot record.
type Snapshot struct {
	ID             string
	UUID           string
	TeamID         string
	SourceServerID string
	Name           string
	Ignore         string
	Status         string
	Error          *string
	BytesDone      int64
	BytesTotal     int64
	SizeBytes      *int64
	StoredBytes    *int64
	CreatedAt      int64
	StartedAt      *int64
	CompletedAt    *int64
	// Damage says why a ready snapshot cannot be restored or downloaded
	// whole, as found by a read or a check (integrity.go), and DamagedAt
	// when; nil for one not known to be damaged.
	Damage    *string
	DamagedAt *int64
}

const columns = `id, uuid, team_id, source_server_id, name, ignore, status, error, bytes_done, bytes_total,
	size_bytes, stored_bytes, created_at, started_at, completed_at, damage, damaged_at`

func scan(row interface{ Scan(...any) error }) (Snapshot, error) {
	var s Snapshot
	err := row.Scan(&s.ID, &s.UUID, &s.TeamID, &s.SourceServerID, &s.Name, &s.Ignore, &s.Status, &s.Error,
		&s.BytesDone, &s.BytesTotal, &s.SizeBytes, &s.StoredBytes, &s.CreatedAt, &s.StartedAt, &s.CompletedAt,
		&s.Damage, &s.DamagedAt)
	return s, err
}

// Create records a snapshot of the team's server and takes it in the
// background (pending, then creating, then ready or failed). Errors:
// *validate.Error (name, ignore), servers.ErrNotFound,
// servers.ErrInstalling, *servers.TeamLimitError (the team keeps as many
// snapshots as its limit allows: failed ones do not count).
func (s *Service) Create(ctx context.Context, teamID, serverID, name, ignoreText string) (Snapshot, error) {
	var c validate.Collector
	if n := utf8.RuneCountInString(name); !utf8.ValidString(name) || n < 1 || n > MaxName || strings.ContainsFunc(name, isControl) {
		c.Add("name", "must be 1 to %d characters of text without control characters", MaxName)
	}
	if len(ignoreText) > MaxIgnore {
		c.Add("ignore", "must be at most %d bytes", MaxIgnore)
	} else if _, err := ignore.Parse(ignoreText); err != nil {
		c.Add("ignore", "%v", err)
	}
	if err := c.Err(); err != nil {
		return Snapshot{}, err
	}
	sv, err := s.servers.Get(ctx, teamID, serverID)
	if err != nil {
		return Snapshot{}, err
	}
	if sv.Status == servers.StatusInstalling {
		return Snapshot{}, servers.ErrInstalling
	}
	// Its files are on its node: another replica's server is refused now
	// (servers.OtherNodeError), not failed later in the background.
	if _, err := s.servers.Access(ctx, teamID, serverID, false); err != nil {
		return Snapshot{}, err
	}
	now := store.Now()
	snap := Snapshot{ID: ids.New("snap"), UUID: uuid.NewString(), TeamID: teamID, SourceServerID: sv.ID, Name: name,
		Ignore: ignoreText, Status: StatusPending, CreatedAt: now}
	// Known as this process's before the record exists, so the collector
	// never takes it for an abandoned one.
	tctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.running[snap.ID] = cancel
	s.mu.Unlock()
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		// The team's snapshot limit, checked and the row inserted in one
		// transaction (under the team's lock on PostgreSQL).
		l, err := servers.LockTeamLimits(ctx, s.db, tx, teamID)
		if err != nil {
			return err
		}
		if l.Snapshots > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM snapshots WHERE team_id = $1 AND status <> $2`,
				teamID, StatusFailed).Scan(&n); err != nil {
				return fmt.Errorf("count the team's snapshots: %w", err)
			}
			if n+1 > l.Snapshots {
				return &servers.TeamLimitError{Limit: "snapshots", Max: l.Snapshots, Used: n, Asked: 1}
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status,
			owner, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)`,
			snap.ID, snap.UUID, teamID, sv.ID, name, ignoreText, StatusPending, s.opts.Owner, now); err != nil {
			return fmt.Errorf("record snapshot: %w", err)
		}
		return nil
	})
	if err != nil {
		s.forget(snap.ID, cancel)
		return Snapshot{}, err
	}
	s.goTake(tctx, cancel, snap)
	return snap, nil
}

func (s *Service) forget(id string, cancel context.CancelFunc) {
	cancel()
	s.mu.Lock()
	delete(s.running, id)
	s.mu.Unlock()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Get returns one of the team's snapshots. Errors: ErrNotFound.
func (s *Service) Get(ctx context.Context, teamID, id string) (Snapshot, error) {
	snap, err := scan(s.db.Read().QueryRowContext(ctx, `SELECT `+columns+` FROM snapshots WHERE id = $1 AND team_id = $2`, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, ErrNotFound
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	return snap, nil
}

// List returns the team's snapshots, of one server when serverID is not
// "", newest first: the first page of Page, at most MaxList.
func (s *Service) List(ctx context.Context, teamID, serverID string) ([]Snapshot, error) {
	out, _, err := s.Page(ctx, teamID, serverID, 0, "")
	return out, err
}

// Page returns one page of the team's snapshots (of one server when
// serverID is not ""), newest first: at most limit (1–MaxList, 0 for
// MaxList) after cursor ("" for the first page), and the cursor of the
// next page ("" after the last). A cursor is the creation time and id
// of the last snapshot of a page, so a page follows the one before it
// whatever was created or deleted meanwhile: nothing that stays is
// listed twice or skipped. Errors: *validate.Error (limit, cursor).
func (s *Service) Page(ctx context.Context, teamID, serverID string, limit int, cursor string) ([]Snapshot, string, error) {
	var c validate.Collector
	if limit == 0 {
		limit = MaxList
	}
	if limit < 1 || limit > MaxList {
		c.Add("limit", "must be between 1 and %d", MaxList)
	}
	q, args := `SELECT `+columns+` FROM snapshots WHERE team_id = $1`, []any{teamID}
	if serverID != "" {
		args = append(args, serverID)
		q += fmt.Sprintf(` AND source_server_id = $%d`, len(args))
	}
	if cursor != "" {
		at, id, ok := parseListCursor(cursor)
		if !ok {
			c.Add("cursor", "is not a cursor this API gave (use next_cursor as it is)")
		}
		args = append(args, at, id)
		q += fmt.Sprintf(` AND (created_at < $%d OR (created_at = $%d AND id < $%d))`, len(args)-1, len(args)-1, len(args))
	}
	if err := c.Err(); err != nil {
		return nil, "", err
	}
	args = append(args, limit+1)
	rows, err := s.db.Read().QueryContext(ctx, q+fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	out := []Snapshot{}
	for rows.Next() {
		snap, err := scan(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, snap)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = "c" + strconv.FormatInt(last.CreatedAt, 10) + "." + last.ID
	}
	return out, next, nil
}

// parseListCursor reads a cursor of Page: "c<created_at>.<snapshot id>".
func parseListCursor(cursor string) (at int64, id string, ok bool) {
	rest, ok := strings.CutPrefix(cursor, "c")
	if !ok {
		return 0, "", false
	}
	ms, id, ok := strings.Cut(rest, ".")
	if !ok || !ids.HasPrefix(id, "snap") {
		return 0, "", false
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || at < 0 {
		return 0, "", false
	}
	return at, id, true
}

// goTake takes snap in the background, at most Parallel at once, the
// slots shared between teams in turn (slots.go).
func (s *Service) goTake(ctx context.Context, cancel context.CancelFunc, snap Snapshot) {
	started := s.goTracked(func() {
		defer s.forget(snap.ID, cancel)
		if err := s.slots.acquire(ctx, snap.TeamID); err != nil {
			return
		}
		defer s.slots.release(snap.TeamID)
		err := panics.Catch(func() error { return s.take(ctx, snap) })
		if err == nil {
			return
		}
		if s.ctx.Err() != nil {
			// Stopping: the next start fails it (its owner is gone) and
			// collects what it stored.
			return
		}
		s.log.Warn("snapshot failed", "snapshot_id", snap.ID, "err", err)
		s.fail(snap, err)
	})
	if !started {
		// Stopping: the next start fails it (its owner is gone).
		s.forget(snap.ID, cancel)
	}
}

// fail records why snap failed and unpins its chunks.
func (s *Service) fail(snap Snapshot, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := sentence(cause)
	res, err := s.db.Write().ExecContext(ctx, `UPDATE snapshots SET status = $1, error = $2, completed_at = $3, updated_at = $3
		WHERE id = $4 AND status IN ($5, $6)`, StatusFailed, msg, store.Now(), snap.ID, StatusPending, StatusCreating)
	if err != nil {
		s.log.Warn("record a failed snapshot", "snapshot_id", snap.ID, "err", err)
		return
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// Ready meanwhile (its references are its own now), or deleted
		// (the collector drops the references of a snapshot with no
		// record): not this call's to unpin.
		return
	}
	// A manifest its walk stored (a crash or a failure after the walk)
	// goes before the chunks it names: no manifest is left naming chunks
	// that are gone. One this misses, the collector removes (collect).
	if err := s.store.Delete(ctx, manifest.Key(snap.UUID)); err != nil && !errors.Is(err, blob.ErrNotFound) {
		s.log.Warn("delete a failed snapshot's manifest (the collector retries)", "snapshot_id", snap.ID, "err", err)
	}
	if _, _, err := s.unpin(ctx, snap.UUID); err != nil {
		s.log.Warn("collect a failed snapshot's chunks (the collector retries)", "snapshot_id", snap.ID, "err", err)
	}
}

// told is what a team reads of err: the sentence of a *blob.Error in it
// (the store's failure; its detail, which names the endpoint, bucket and
// prefix, is for the log), else err's text.
func told(err error) string {
	if be, ok := errors.AsType[*blob.Error](err); ok {
		return be.Public()
	}
	return err.Error()
}

// sentence is err as one sentence for a record's error field (told).
func sentence(err error) string {
	msg := told(err)
	if msg == "" {
		return "The snapshot failed."
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}

// take takes one snapshot: a running game server's saves are flushed and
// paused around the walk, every chunk is pinned before it is looked up
// or stored, and the record becomes ready in one transaction with its
// figures.
func (s *Service) take(ctx context.Context, snap Snapshot) error {
	res, err := s.db.Write().ExecContext(ctx, `UPDATE snapshots SET status = $1, started_at = $2, updated_at = $2
		WHERE id = $3 AND status = $4`, StatusCreating, store.Now(), snap.ID, StatusPending)
	if err != nil {
		return fmt.Errorf("start the snapshot: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // deleted meanwhile
	}
	m, err := ignore.Parse(snap.Ignore)
	if err != nil {
		return err
	}
	endTake, err := s.beginTake(ctx, snap)
	if err != nil {
		return err
	}
	defer endTake()
	// No reinstall replaces files under the walk (servers.Reading).
	reading, err := s.servers.Reading(ctx, snap.TeamID, snap.SourceServerID)
	if err != nil {
		return fmt.Errorf("read the server's files: %w", err)
	}
	defer reading.Release()
	a, err := s.servers.Access(ctx, snap.TeamID, snap.SourceServerID, false)
	if err != nil {
		return fmt.Errorf("open the server's files: %w", err)
	}
	root, err := files.Open(a.Root)
	if err != nil {
		return fmt.Errorf("open the server's files: %w", err)
	}
	defer root.Close()
	parent, err := s.parentOf(ctx, snap)
	if err != nil {
		return err
	}
	r, err := s.walk(ctx, snap, m, root, parent, reading)
	// The walk is over: a restore or a reinstall may begin now, before
	// the snapshot is recorded ready (a client that sees it ready and
	// acts at once is never told it is still being taken).
	reading.Release()
	endTake()
	if err != nil {
		return err
	}
	if r.ParentErr != nil {
		s.log.Info("snapshot taken without its parent: every file read", "snapshot_id", snap.ID, "err", r.ParentErr)
	}
	// The parent's chunks were all pinned; those the manifest does not
	// reference (the parent's changed parts) lose this snapshot's
	// reference as it becomes ready.
	extra, err := s.extraRefs(ctx, snap.UUID, r.Chunks)
	if err != nil {
		return err
	}
	ready := false
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		now := store.Now()
		res, err := tx.ExecContext(ctx, `UPDATE snapshots SET status = $1, size_bytes = $2, stored_bytes = $3,
			bytes_done = $4, bytes_total = $4, completed_at = $5, updated_at = $5, owner = NULL WHERE id = $6 AND status = $7`,
			StatusReady, r.SizeBytes, r.StoredBytes, r.SizeBytes, now, snap.ID, StatusCreating)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		ready = true
		for _, k := range extra {
			if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_chunks WHERE snapshot_uuid = $1 AND chunk = $2`, snap.UUID, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the snapshot ready: %w", err)
	}
	if ready && len(extra) > 0 {
		if _, _, err := s.reapAll(context.WithoutCancel(ctx), extra); err != nil {
			s.log.Warn("collect the parent's chunks a snapshot does not use (the collector retries)", "snapshot_id", snap.ID, "err", err)
		}
	}
	if !ready {
		// Deleted while it was taken: its chunks go, and the manifest
		// with no record is the collector's.
		if _, _, err := s.unpin(context.WithoutCancel(ctx), snap.UUID); err != nil {
			s.log.Warn("collect a deleted snapshot's chunks (the collector retries)", "snapshot_id", snap.ID, "err", err)
		}
		_ = s.store.Delete(context.WithoutCancel(ctx), manifest.Key(snap.UUID))
	}
	return nil
}

// walk stores the server's files (engine.Create), its saves paused
// around the walk if it runs. A walk under which the server's status
// changed (a process started, became running, stopped or crashed: one
// that may have written its world without save-off), or a batch of files
// was moved into the root (a modpack, an extracted archive: the walk may
// hold part of it), is not kept: its manifest is dropped and the files
// are walked again once the server settles, at most walkAttempts times
// (ErrServerUnsettled). The chunks
// an earlier walk stored stay pinned to the snapshot: the next walk
// finds most of them, and those it does not use lose their reference
// when the snapshot becomes ready.
func (s *Service) walk(ctx context.Context, snap Snapshot, m *ignore.Matcher, root *files.Root, parent string, reading *servers.Reader) (engine.Result, error) {
	for attempt := 1; ; attempt++ {
		resume, err := s.pauseSaves(ctx, snap)
		if err != nil {
			return engine.Result{}, err
		}
		var lastProgress time.Time
		r, err := engine.Create(ctx, root, s.store, engine.CreateOptions{
			ID:          snap.UUID,
			Ignore:      m.Match,
			Parent:      parent,
			Now:         s.opts.Now,
			Compression: s.opts.Compression,
			Space:       s.opts.chunkSpace(snap.TeamID),
			Pin:         func(ctx context.Context, key string) error { return s.pin(ctx, snap.UUID, key) },
			Stored:      func(key string, size int64) { s.recordSize(s.ctx, key, size) },
			Progress: func(done, total int64) {
				// Never "all read" while creating: the walk's last call
				// (done == total) may be followed by another walk, and
				// the ready transaction writes the final figures.
				if time.Since(lastProgress) < 250*time.Millisecond || done >= total {
					return
				}
				lastProgress = time.Now()
				_, _ = s.db.Write().ExecContext(ctx, `UPDATE snapshots SET bytes_done = $1, bytes_total = $2, updated_at = $3
					WHERE id = $4 AND status = $5`, done, total, store.Now(), snap.ID, StatusCreating)
			},
		})
		resume()
		change := reading.Changed()
		if err != nil || change == servers.Unchanged {
			return r, err
		}
		if err := s.store.Delete(ctx, r.ManifestKey); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return engine.Result{}, fmt.Errorf("drop the manifest of an unsettled walk: %w", err)
		}
		if attempt == walkAttempts {
			return engine.Result{}, ErrServerUnsettled
		}
		what := "the server was started or stopped"
		if change == servers.FilesMoved {
			what = "files were installed or extracted into the server"
		}
		s.log.Info(what+" under a snapshot's walk; walking its files again",
			"snapshot_id", snap.ID, "server_id", snap.SourceServerID, "attempt", attempt)
		s.servers.Note(snap.SourceServerID, fmt.Sprintf("snapshot %s: %s while its files were read; reading them again", snap.ID, what))
		if err := s.waitSettled(ctx, snap, reading); err != nil {
			return engine.Result{}, err
		}
		reading.Again()
	}
}

// waitSettled waits, up to SaveTimeout, until the server is neither
// starting nor stopping and no batch of files is being moved into it (a
// walk begun meanwhile would see it change).
func (s *Service) waitSettled(ctx context.Context, snap Snapshot, reading *servers.Reader) error {
	deadline := time.Now().Add(s.opts.SaveTimeout)
	for {
		sv, err := s.servers.Get(ctx, snap.TeamID, snap.SourceServerID)
		if err != nil {
			return err
		}
		settled := sv.Status != servers.StatusStarting && sv.Status != servers.StatusStopping && !reading.Batching()
		if settled || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// parentOf returns the manifest key of the server's last ready snapshot
// (the one before snap), "" when it has none: engine.Create reuses the
// chunks of its files that did not change.
func (s *Service) parentOf(ctx context.Context, snap Snapshot) (string, error) {
	var uuid string
	err := s.db.Read().QueryRowContext(ctx, `SELECT uuid FROM snapshots WHERE source_server_id = $1 AND team_id = $2
		AND status = $3 AND id <> $4 ORDER BY completed_at DESC, id DESC LIMIT 1`,
		snap.SourceServerID, snap.TeamID, StatusReady, snap.ID).Scan(&uuid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("find the previous snapshot: %w", err)
	}
	return manifest.Key(uuid), nil
}

// extraRefs returns the chunks the snapshot uuid references in the ledger
// that its manifest (chunks, sorted) does not.
func (s *Service) extraRefs(ctx context.Context, uuid string, chunks []string) ([]string, error) {
	refs, err := s.refsOf(ctx, uuid)
	if err != nil {
		return nil, err
	}
	var extra []string
	for _, k := range refs {
		if _, found := slices.BinarySearch(chunks, k); !found {
			extra = append(extra, k)
		}
	}
	return extra, nil
}

// pauseSaves makes a running game server flush its world and stop
// writing it (save-off, save-all flush) and returns what turns saving on
// again (save-on), always called. Its console is followed to await the
// flush's "Saved the game"; a console that cannot be followed (it has
// servers.MaxStreams streams open) fails the snapshot before anything is
// sent or read (ErrSavesNotPaused): walked with saving on, the world
// could be read half written, and a snapshot must not hold that without
// a word. A stream dropped under the wait (the server's output outran
// it) is followed again; a confirmation missed meanwhile costs the wait.
// A server that does not confirm within SaveTimeout is snapshotted
// anyway with saving off, said in its console and logged: the world is
// at most as torn as the game's own crash recovery handles. A server
// that stopped meanwhile has nothing to pause (a stop saves the world,
// which the walk sees as a change: servers.Reader.Changed).
func (s *Service) pauseSaves(ctx context.Context, snap Snapshot) (resume func(), err error) {
	nothing := func() {}
	sv, err := s.servers.Get(ctx, snap.TeamID, snap.SourceServerID)
	if err != nil {
		return nil, fmt.Errorf("read the server: %w", err)
	}
	if sv.Status != servers.StatusRunning {
		return nothing, nil
	}
	if p, ok := s.cat.Get(sv.Software); !ok || p.Category != catalog.Server {
		return nothing, nil
	}
	events, stop, err := s.servers.Stream(ctx, snap.TeamID, sv.ID)
	if err != nil {
		if errors.Is(err, servers.ErrTooManyStreams) {
			return nil, fmt.Errorf("%w: %w (close one of them and take the snapshot again)", ErrSavesNotPaused, err)
		}
		return nil, fmt.Errorf("%w: follow its console: %w", ErrSavesNotPaused, err)
	}
	defer func() { stop() }()
	if err := s.servers.Command(ctx, snap.TeamID, sv.ID, "save-off"); err != nil {
		if errors.Is(err, servers.ErrOffline) {
			return nothing, nil // stopped meanwhile
		}
		return nil, fmt.Errorf("%w: save-off: %w", ErrSavesNotPaused, err)
	}
	resume = func() {
		if err := s.servers.Command(context.WithoutCancel(ctx), snap.TeamID, sv.ID, "save-on"); err != nil && !errors.Is(err, servers.ErrOffline) {
			s.log.Warn("turn saving on again after a snapshot", "server_id", sv.ID, "err", err)
		}
	}
	if err := s.servers.Command(ctx, snap.TeamID, sv.ID, "save-all flush"); err != nil {
		if errors.Is(err, servers.ErrOffline) {
			return resume, nil // stopped meanwhile: the stop saved the world
		}
		resume()
		return nil, fmt.Errorf("%w: save-all flush: %w", ErrSavesNotPaused, err)
	}
	timeout := time.NewTimer(s.opts.SaveTimeout)
	defer timeout.Stop()
	dropped := false
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				// Dropped: follow it again. If that is refused, events
				// is nil and the wait runs out.
				dropped = true
				stop()
				if events, stop, err = s.servers.Stream(ctx, snap.TeamID, sv.ID); err != nil {
					events, stop = nil, func() {}
				}
				continue
			}
			if ev.Kind == "line" && strings.Contains(ev.Data, "Saved the game") {
				return resume, nil
			}
		case <-timeout.C:
			why := "the server did not confirm save-all flush"
			if dropped {
				why += " (its console stream was dropped meanwhile)"
			}
			s.log.Warn(why+"; taking the snapshot anyway, saving off", "snapshot_id", snap.ID, "server_id", sv.ID, "timeout", s.opts.SaveTimeout)
			s.servers.Note(sv.ID, fmt.Sprintf("snapshot %s: %s within %s; its files are read with saving off", snap.ID, why, s.opts.SaveTimeout))
			return resume, nil
		case <-ctx.Done():
			return resume, nil
		}
	}
}

// Deletion is what Delete did (api.md §6).
type Deletion struct {
	Deleted        bool
	StorageDeleted bool
	CleanupSkipped bool
	CleanupReason  *string // "not_stored", "in_use", "storage_unavailable"; nil when nothing was skipped
	FreedBytes     int64
	SharedBytes    int64
}

// Delete deletes one of the team's snapshots: the record, then (for a
// ready one) its manifest and every chunk no other snapshot references —
// unless a restore or a download reads it: then its last reader does
// that when it ends (reason in_use; reads.go). A snapshot still being
// taken is stopped; what it stored is collected in the background.
// Errors: ErrNotFound.
func (s *Service) Delete(ctx context.Context, teamID, id string) (Deletion, error) {
	var snap Snapshot
	read := false // a restore or a download reads it: its storage stays for now
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		snap, err = scan(tx.QueryRowContext(ctx, `SELECT `+columns+` FROM snapshots WHERE id = $1 AND team_id = $2`, id, teamID))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err = tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = $1`, id); err != nil {
			return err
		}
		if snap.Status != StatusReady {
			return nil // only a ready snapshot has readers (beginRead)
		}
		read, err = s.readersLeft(ctx, tx, snap.UUID)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Deletion{}, err
		}
		return Deletion{}, fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	d := Deletion{Deleted: true}
	if snap.Status != StatusReady {
		s.mu.Lock()
		if cancel := s.running[id]; cancel != nil {
			cancel()
		}
		s.mu.Unlock()
		reason := "not_stored"
		d.CleanupSkipped, d.CleanupReason = true, &reason
		// Its references go now; its chunks are reaped in the background.
		if _, err := s.db.Write().ExecContext(ctx, `DELETE FROM snapshot_chunks WHERE snapshot_uuid = $1`, snap.UUID); err != nil {
			s.log.Warn("drop a deleted snapshot's references (the collector retries)", "snapshot_id", id, "err", err)
		}
		s.Wake()
		return d, nil
	}
	if read {
		// Its last reader cleans it up when it ends (reads.go).
		reason := "in_use"
		d.CleanupSkipped, d.CleanupReason = true, &reason
		return d, nil
	}
	ctx = context.WithoutCancel(ctx) // the record is gone: finish the cleanup
	freed, shared, err := s.dropStorage(ctx, snap.UUID)
	d.FreedBytes, d.SharedBytes = freed, shared
	if err != nil {
		return s.unavailable(d, id, err), nil
	}
	d.StorageDeleted = true
	return d, nil
}

// unavailable reports a cleanup the store interrupted: the collector
// finishes it.
func (s *Service) unavailable(d Deletion, id string, err error) Deletion {
	s.log.Warn("snapshot storage cleanup interrupted; the collector finishes it", "snapshot_id", id, "err", err)
	reason := "storage_unavailable"
	d.CleanupSkipped, d.CleanupReason = d.FreedBytes == 0, &reason
	s.Wake()
	return d
}

// Take records and takes a snapshot of the server now and waits for it
// (the deployments executor, before a replace or delete). Errors: as
// Create, or the snapshot's own failure.
func (s *Service) Take(ctx context.Context, teamID, serverID, name string) (Snapshot, error) {
	snap, err := s.Create(ctx, teamID, serverID, name, "")
	if err != nil {
		return Snapshot{}, err
	}
	for {
		cur, err := s.Get(ctx, teamID, snap.ID)
		if err != nil {
			return Snapshot{}, err
		}
		switch cur.Status {
		case StatusReady:
			return cur, nil
		case StatusFailed:
			msg := "the snapshot failed"
			if cur.Error != nil {
				msg = *cur.Error
			}
			return cur, errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return cur, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Before is Take for the deployments executor: a snapshot named reason of
// a server about to be replaced or deleted; it returns the snapshot's id.
func (s *Service) Before(ctx context.Context, teamID, serverID, reason string) (string, error) {
	if len(reason) > MaxName {
		reason = reason[:MaxName]
	}
	snap, err := s.Take(ctx, teamID, serverID, reason)
	return snap.ID, err
}

// Wake makes the collector run now.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run collects garbage every CollectEvery (and when woken) until ctx
// ends, then stops every snapshot being taken and waits for them.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.CollectEvery)
	defer t.Stop()
	defer s.Close()
	for {
		if err := s.collect(ctx, s.opts.Grace); err != nil && ctx.Err() == nil {
			s.log.Warn("snapshot collector", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}

// Close stops the snapshots being taken and restores running here and
// waits for them: a snapshot cut short is failed by the next start (its
// owner gone); a restore cut short before its commit point leaves the
// files as they were, after it is finished by Recover at the next start.
func (s *Service) Close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true // goTracked starts nothing more
	s.mu.Unlock()
	s.wg.Wait()
}

// errAbandoned is the error of a snapshot whose taker stopped.
var errAbandoned = errors.New("kiln stopped while the snapshot was being taken; take it again")

// failAbandoned fails the snapshots whose taker stopped — its instance
// gone, silent for a minute, or an earlier instance of this node (only
// one process holds a node's data dir: a row of another one is a dead
// process's) — and unpins their chunks.
func (s *Service) failAbandoned(ctx context.Context) error {
	stale := store.Now() - time.Minute.Milliseconds()
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+columns+` FROM snapshots s WHERE s.status IN ($1, $2)
		AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = s.owner AND i.seen_at > $3
			AND (i.node_id <> $4 OR i.id = $5))`, StatusPending, StatusCreating, stale, s.opts.Node, s.opts.Owner)
	if err != nil {
		return fmt.Errorf("find abandoned snapshots: %w", err)
	}
	lost, err := scanAll(rows, func(rows *sql.Rows) (Snapshot, error) { return scan(rows) })
	if err != nil {
		return fmt.Errorf("find abandoned snapshots: %w", err)
	}
	for _, snap := range lost {
		s.mu.Lock()
		_, mine := s.running[snap.ID]
		s.mu.Unlock()
		if mine {
			continue
		}
		s.fail(snap, errAbandoned)
	}
	return nil
}
