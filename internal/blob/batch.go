package blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Batch groups Puts whose blobs need to be durable only together, at a
// barrier: the snapshot engine stores a snapshot's chunks through one and
// commits it before it stores the manifest that references them. Its
// methods are safe for concurrent use.
type Batch interface {
	// Put is Store.Put, except that the blob may become visible (to Get,
	// Stat, List) and durable only when Commit returns. A key put
	// earlier in the same batch is not created again (created is false).
	Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error)
	// Commit makes every blob the batch's Puts created visible and
	// durable, and every blob already visible when it was called durable
	// too, before it returns nil. The batch takes no Put after Commit.
	Commit(ctx context.Context) error
	// Close drops what was put and not committed. It is safe after
	// Commit, and more than once.
	Close() error
}

// Putter is what NewBatch needs of a store.
type Putter interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error)
}

// NewBatch starts a batch on s. The file backend stages each blob of the
// batch without syncing it, and Commit syncs the staged files at once,
// moves them to their keys and syncs again (see doc.go). Any other store
// (the S3 backend, whose Put is durable when it returns, or another
// package's) gets a batch whose Put is s.Put and whose Commit does
// nothing.
func NewBatch(s Putter) Batch {
	if fs, ok := s.(*fileStore); ok {
		return &fileBatch{s: fs, keys: map[string]struct{}{}}
	}
	return durableBatch{s}
}

// durableBatch is the batch of a store whose Put is durable on return.
type durableBatch struct{ s Putter }

func (b durableBatch) Put(ctx context.Context, key string, r io.Reader, size int64) (bool, error) {
	return b.s.Put(ctx, key, r, size)
}
func (durableBatch) Commit(context.Context) error { return nil }
func (durableBatch) Close() error                 { return nil }

// fileBatch stages blobs in the file store's staging directory, unsynced
// and unpublished, until Commit.
type fileBatch struct {
	s *fileStore

	mu        sync.Mutex
	dir       string              // its own directory in the staging one, made at the first Put
	keys      map[string]struct{} // put in this batch (staged or found stored)
	staged    []stagedBlob        // to publish at Commit
	committed bool
}

type stagedBlob struct{ tmp, key string }

// Put stages r in a new file, hashing the bytes as it writes them (a
// Checked body whose bytes differ from its checksum fails, ErrChecksum,
// and leaves nothing staged), and starts its writeback
// (sync_file_range(SYNC_FILE_RANGE_WRITE)), so that little is left to
// write when Commit syncs.
func (b *fileBatch) Put(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error) {
	r, want, check := unwrapChecked(r)
	if err := checkFileKey(key); err != nil {
		return false, fmt.Errorf("put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	b.mu.Lock()
	_, dup := b.keys[key]
	closed := b.committed
	b.mu.Unlock()
	if closed {
		return false, fmt.Errorf("put %s: the batch is committed", key)
	}
	if dup {
		return false, nil
	}
	switch _, err := b.s.Stat(ctx, key); {
	case err == nil:
		return false, nil
	case !errors.Is(err, ErrNotFound):
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	dir, err := b.stagingDir()
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	// Paths relative to the staging directory, through the batch's own
	// (by name: a descriptor of it could be closed, and its number
	// reused, under a Put still writing).
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := dir + "/b-" + hex.EncodeToString(rnd[:])
	if br, ok := r.(*bytes.Reader); ok && size >= 0 {
		direct, wrote, err := b.s.stageDirect(tmp, br, size)
		if err == nil && direct && check {
			if err = checkWritten(wrote, want); err != nil {
				unix.Unlinkat(int(b.s.stage.Fd()), tmp, 0)
			}
		}
		if err != nil {
			return false, fmt.Errorf("put %s: %w", key, err)
		}
		if direct {
			return b.staged1(key, tmp)
		}
	}
	f, err := b.s.root.OpenFile(stageDir+"/"+tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	w := &crcWriter{w: f}
	err = writeExact(ctx, w, r, size)
	if err == nil && check {
		err = checkWritten(w.crc, want)
	}
	if err == nil {
		// Only a hint to start writing: an error here is Commit's to meet.
		_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(int(b.s.stage.Fd()), tmp, 0)
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	return b.staged1(key, tmp)
}

// stagingDir is the name of the batch's own directory in the staging
// one, made at the first Put: a batch's hundreds of staged names never
// grow the staging directory itself (ext4 never shrinks a directory, and
// its size counts in the store's), and it goes when the batch ends.
func (b *fileBatch) stagingDir() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.committed {
		return "", errors.New("the batch is committed")
	}
	if b.dir != "" {
		return b.dir, nil
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "batch-" + hex.EncodeToString(rnd[:])
	if err := unix.Mkdirat(int(b.s.stage.Fd()), name, 0o700); err != nil {
		return "", fmt.Errorf("staging directory: %w", err)
	}
	b.dir = name
	return name, nil
}

// removeDir removes the batch's staging directory once the batch ended
// (Commit or Close). A Put still writing there fails, as any Put after
// the end does; what it leaves makes the removal fail, and the next
// Open's clean removes it.
func (b *fileBatch) removeDir() {
	b.mu.Lock()
	name := b.dir
	b.mu.Unlock()
	if name != "" {
		unix.Unlinkat(int(b.s.stage.Fd()), name, unix.AT_REMOVEDIR)
	}
}

// staged1 records the staged file tmp as key's, unless a concurrent Put
// of the key won or Commit began meanwhile.
func (b *fileBatch) staged1(key, tmp string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.keys[key]; dup || b.committed {
		// A concurrent Put of the key won, or Commit began: this copy goes.
		unix.Unlinkat(int(b.s.stage.Fd()), tmp, 0)
		if b.committed {
			return false, fmt.Errorf("put %s: the batch is committed", key)
		}
		return false, nil
	}
	b.keys[key] = struct{}{}
	b.staged = append(b.staged, stagedBlob{tmp: tmp, key: key})
	return true, nil
}

// Commit syncs the file system (syncfs: the staged files' data, and that
// of every blob another batch published without its second sync yet),
// renames each staged file to its key (put-if-absent, as Put), and syncs
// the file system again (the new names and directories). A blob is thus
// never visible before its bytes are durable: a crash at any point leaves
// staged files (removed at the next Open, Options.CleanBefore) and blobs
// that are whole.
func (b *fileBatch) Commit(ctx context.Context) error {
	defer b.removeDir()
	b.mu.Lock()
	staged := b.staged
	b.staged, b.committed = nil, true
	b.mu.Unlock()
	sfd := int(b.s.stage.Fd())
	drop := func(from int) {
		for _, st := range staged[from:] {
			unix.Unlinkat(sfd, st.tmp, 0)
		}
	}
	if err := ctx.Err(); err != nil {
		drop(0)
		return fmt.Errorf("commit: %w", err)
	}
	if err := unix.Syncfs(sfd); err != nil {
		drop(0)
		return fmt.Errorf("commit: sync the staged blobs: %w", err)
	}
	if len(staged) == 0 {
		return nil // the sync made what was visible durable; nothing to rename
	}
	if err := b.publishAll(staged); err != nil {
		return err
	}
	if err := unix.Syncfs(sfd); err != nil {
		return fmt.Errorf("commit: sync the store: %w", err)
	}
	return nil
}

// publishWorkers rename staged blobs into place at once: a snapshot
// commits hundreds of chunks in about as many directories, one after the
// other at the end of its run (60 ms of a 1.2 s snapshot before).
const publishWorkers = 4

// publishAll renames each staged blob to its key (put-if-absent),
// directory by directory on publishWorkers goroutines. On the first error
// it stops, removes the staged files not published, and returns it.
func (b *fileBatch) publishAll(staged []stagedBlob) error {
	byDir := map[string][]int{}
	var order []string
	for i, st := range staged {
		dir, _ := splitKey(st.key)
		if _, ok := byDir[dir]; !ok {
			order = append(order, dir)
		}
		byDir[dir] = append(byDir[dir], i)
	}
	sfd := int(b.s.stage.Fd())
	published := make([]bool, len(staged)) // each index written by one worker
	dirs := make(chan string)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	for range min(publishWorkers, len(order)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dir := range dirs {
				if failed() {
					continue // drained: the files are removed below
				}
				d, err := b.s.mkdirs(dir, false)
				if err != nil {
					fail(fmt.Errorf("commit %s: %w", staged[byDir[dir][0]].key, err))
					continue
				}
				for _, i := range byDir[dir] {
					_, name := splitKey(staged[i].key)
					created, err := b.s.publish(staged[i].tmp, d, name)
					if err != nil {
						fail(fmt.Errorf("commit %s: %w", staged[i].key, err))
						break
					}
					if !created {
						// Stored meanwhile by another Put: the same bytes
						// (keys are content-addressed or unique), kept as
						// they are.
						unix.Unlinkat(sfd, staged[i].tmp, 0)
					}
					published[i] = true
				}
				d.Close()
			}
		}()
	}
	for _, dir := range order {
		dirs <- dir
	}
	close(dirs)
	wg.Wait()
	if firstErr != nil {
		for i, st := range staged {
			if !published[i] {
				unix.Unlinkat(sfd, st.tmp, 0)
			}
		}
	}
	return firstErr
}

func (b *fileBatch) Close() error {
	defer b.removeDir()
	b.mu.Lock()
	staged := b.staged
	b.staged, b.committed = nil, true
	b.mu.Unlock()
	for _, st := range staged {
		unix.Unlinkat(int(b.s.stage.Fd()), st.tmp, 0)
	}
	return nil
}
