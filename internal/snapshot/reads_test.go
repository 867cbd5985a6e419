package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// checkInUse checks the deletion a snapshot being read gets: its record
// gone, its storage left to its last reader.
func checkInUse(t *testing.T, d Deletion) {
	t.Helper()
	if !d.Deleted || d.StorageDeleted || !d.CleanupSkipped || deref(d.CleanupReason) != "in_use" || d.FreedBytes != 0 || d.SharedBytes != 0 {
		t.Fatalf("delete of a snapshot being read = %+v (reason %q), want deleted, cleanup skipped (in_use), nothing freed", d, deref(d.CleanupReason))
	}
}

// waitGone waits until no chunk, manifest, chunk row or reader is left
// (a deleted snapshot's last reader cleans in the background).
func (e *svcEnv) waitGone() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		blobs := e.blobs(chunkPrefix) + e.blobs(manifestPrefix)
		rows := e.count(`SELECT count(*) FROM chunks`) + e.count(`SELECT count(*) FROM snapshot_chunks`)
		readers := e.count(`SELECT count(*) FROM snapshot_reads`)
		if blobs == 0 && rows == 0 && readers == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("30 s after the last reader ended: %d blobs, %d ledger rows, %d readers left", blobs, rows, readers)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeleteWhileDownloading, on both stores: a snapshot deleted while it
// is downloaded is gone from the API at once (get, a new download, a
// restore: not found), its storage kept (also through a collector pass)
// until the download, written after the delete, ends whole; then its
// manifest, chunks and ledger rows go without the collector.
func TestDeleteWhileDownloading(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		big := randomText(900 << 10) // 1.8 MB: more than one chunk
		sv := e.server("dl", map[string]string{"server.properties": "motd=kept\n", "world/big.dat": big})
		snap := e.take(sv.ID, "old", "")
		chunks := e.blobs(chunkPrefix)
		if chunks < 2 {
			t.Fatalf("the snapshot stored %d chunks, want 2 or more", chunks)
		}

		d, err := e.svc.Export(ctx, e.team, snap.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		del, err := e.svc.Delete(ctx, e.team, snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkInUse(t, del)
		if _, err := e.svc.Get(ctx, e.team, snap.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after the delete = %v, want ErrNotFound", err)
		}
		if _, err := e.svc.Export(ctx, e.team, snap.ID, ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("a new Export after the delete = %v, want ErrNotFound", err)
		}
		if _, err := e.svc.Restore(ctx, e.team, snap.ID, sv.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Restore after the delete = %v, want ErrNotFound", err)
		}
		if err := e.svc.collect(ctx, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		if n, m := e.blobs(chunkPrefix), e.blobs(manifestPrefix); n != chunks || m != 1 {
			t.Fatalf("after a collector pass during the download: %d chunks and %d manifests, want %d and 1", n, m, chunks)
		}

		var buf bytes.Buffer
		if err := d.WriteTo(ctx, &buf, ExportTar); err != nil {
			t.Fatalf("the download of the deleted snapshot: %v", err)
		}
		got := untar(t, &buf)
		if got["server.properties"] != "motd=kept\n" || got["world/big.dat"] != big {
			t.Errorf("the download holds %d files, server.properties %q, world/big.dat of %d bytes", len(got), got["server.properties"], len(got["world/big.dat"]))
		}
		e.waitGone()
	})
}

// TestDeleteWhileRestoring: a snapshot deleted while a restore (the API's,
// in the background, and the executor's RestoreNow) fetches its chunks:
// the restore ends well, the server's files are the snapshot's, and then
// the storage goes.
func TestDeleteWhileRestoring(t *testing.T) {
	for _, now := range []bool{false, true} {
		t.Run(fmt.Sprintf("now=%v", now), func(t *testing.T) {
			e, gate := newGatedEnv(t)
			gate.release = make(chan struct{})
			ctx := t.Context()
			big := randomText(900 << 10)
			sv := e.server("r", map[string]string{"world/level.dat": big, "plugins/a.jar": "jar"})
			snap := e.take(sv.ID, "before", "")
			e.write(sv.ID, map[string]string{"world/level.dat": "changed since", "plugins/b.jar": "new"})

			close(gate.armed)
			restored := make(chan error, 1)
			if now {
				go func() { restored <- e.svc.RestoreNow(ctx, e.team, snap.ID, sv.ID) }()
			} else if _, err := e.svc.Restore(ctx, e.team, snap.ID, ""); err != nil {
				t.Fatal(err)
			}
			select {
			case <-gate.hit:
			case err := <-restored:
				t.Fatalf("RestoreNow ended before reading a chunk: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("the restore read no chunk within 60 s")
			}
			del, err := e.svc.Delete(ctx, e.team, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			checkInUse(t, del)
			if n := e.blobs(manifestPrefix); n != 1 {
				t.Fatalf("%d manifests during the restore, want 1", n)
			}
			close(gate.release)
			if now {
				if err := <-restored; err != nil {
					t.Fatalf("the restore of a snapshot deleted meanwhile: %v", err)
				}
			} else {
				e.waitRestored(sv.ID)
			}
			root := e.node.Node.Root(sv.ID)
			if b, err := os.ReadFile(filepath.Join(root, "world/level.dat")); err != nil || string(b) != big {
				t.Errorf("world/level.dat after the restore: %d bytes, %v; want the snapshot's %d", len(b), err, len(big))
			}
			if _, err := os.Stat(filepath.Join(root, "plugins/b.jar")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("plugins/b.jar (not in the snapshot) after the restore: %v", err)
			}
			e.waitGone()
		})
	}
}

// waitRestored waits until no restore into server id runs.
func (e *svcEnv) waitRestored(id string) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		e.svc.mu.Lock()
		run := e.svc.restoring[id]
		e.svc.mu.Unlock()
		if run == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the restore still runs after 60 s")
		}
		select {
		case <-run.ended:
		case <-time.After(time.Second):
		}
	}
}

// TestDeadReaderHoldsNothing: a reader whose process is gone (its claim's
// instance unknown) neither keeps a delete from cleaning up nor, left
// behind after a delete, keeps the collector from cleaning.
func TestDeadReaderHoldsNothing(t *testing.T) {
	e := newSvcEnv(t, storetest.SQLite(t))
	ctx := t.Context()
	sv := e.server("r", map[string]string{"world/level.dat": randomText(100 << 10)})

	// A dead reader's row: the delete cleans up all the same.
	snap := e.take(sv.ID, "one", "")
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO snapshot_reads (claim, snapshot_uuid, started_at) VALUES ('inst_gone/a', $1, 1)`, snap.UUID); err != nil {
		t.Fatal(err)
	}
	d, err := e.svc.Delete(ctx, e.team, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Deleted || !d.StorageDeleted || d.CleanupSkipped || d.CleanupReason != nil || d.FreedBytes == 0 {
		t.Fatalf("delete with a dead reader = %+v, want the storage deleted", d)
	}
	e.waitGone()

	// A live reader when the delete came, whose process then died.
	snap, err = e.svc.Create(ctx, e.team, sv.ID, "two", "")
	if err != nil {
		t.Fatal(err)
	}
	snap = e.wait(snap.ID)
	if _, err := e.svc.beginRead(ctx, snap.UUID); err != nil {
		t.Fatal(err)
	}
	d, err = e.svc.Delete(ctx, e.team, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkInUse(t, d)
	if _, err := e.db.Write().ExecContext(ctx, `UPDATE snapshot_reads SET claim = 'inst_gone/b'`); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.collect(ctx, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	e.waitGone()

	// No reader begins on a snapshot not ready or gone.
	if _, err := e.svc.beginRead(ctx, snap.UUID); !errors.Is(err, ErrNotFound) {
		t.Errorf("beginRead of a deleted snapshot = %v, want ErrNotFound", err)
	}
}

// TestReadersEndTogether, on both stores: a snapshot deleted while two
// downloads read it is cleaned up by whichever ends last, also when both
// end at once (each must not count the other as still reading).
func TestReadersEndTogether(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		sv := e.server("two", map[string]string{"a": randomText(300 << 10)})
		for round := range rounds {
			e.write(sv.ID, map[string]string{"a": randomText(300 << 10)})
			snap := e.take(sv.ID, fmt.Sprintf("r%d", round), "")
			var ds []*Download
			for range 2 {
				d, err := e.svc.Export(ctx, e.team, snap.ID, "")
				if err != nil {
					t.Fatal(err)
				}
				ds = append(ds, d)
			}
			d, err := e.svc.Delete(ctx, e.team, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			checkInUse(t, d)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, d := range ds {
				wg.Go(func() {
					<-start
					d.Close()
				})
			}
			close(start)
			wg.Wait()
			e.waitGone()
		}
	})
}

// TestConcurrentReadDelete, on both stores: downloads and deletes of the
// same snapshots race, rounds after rounds, beside a collector looping and
// snapshots sharing chunks: a download either is refused (not found) or
// ends whole; a delete either cleans up or leaves it to the download; no
// ready snapshot ever misses a chunk; at the end nothing is left.
func TestConcurrentReadDelete(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newSvcEnv(t, db)
		ctx := t.Context()
		shared := randomText(700 << 10)
		sv := e.server("world", map[string]string{"a": shared, "c": randomText(40 << 10)})
		stopCollecting := e.collectLoop()
		var keep Snapshot // the latest: its chunks are shared with the one deleted
		inUse := 0
		for round := range rounds {
			c := randomText(40 << 10)
			e.write(sv.ID, map[string]string{"c": c})
			snap := e.take(sv.ID, fmt.Sprintf("r%d", round), "")
			var wg sync.WaitGroup
			wg.Go(func() {
				d, err := e.svc.Export(ctx, e.team, snap.ID, "")
				if errors.Is(err, ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("round %d: Export: %v", round, err)
					return
				}
				var buf bytes.Buffer
				if err := d.WriteTo(ctx, &buf, ExportTar); err != nil {
					t.Errorf("round %d: the download: %v", round, err)
					return
				}
				if got := untar(t, &buf); got["a"] != shared || got["c"] != c {
					t.Errorf("round %d: the download holds a of %d bytes, c of %d", round, len(got["a"]), len(got["c"]))
				}
			})
			wg.Go(func() {
				d, err := e.svc.Delete(ctx, e.team, snap.ID)
				if err != nil || !d.Deleted {
					t.Errorf("round %d: Delete = %+v, %v", round, d, err)
				}
				if deref(d.CleanupReason) == "in_use" {
					inUse++
				}
			})
			wg.Wait()
			if keep.ID != "" {
				e.checkComplete(keep)
				if _, err := e.svc.Delete(ctx, e.team, keep.ID); err != nil {
					t.Fatal(err)
				}
			}
			// A snapshot kept across the next round's race.
			keep = e.take(sv.ID, fmt.Sprintf("k%d", round), "")
			e.checkComplete(keep)
		}
		stopCollecting()
		t.Logf("%d of %d deletes came while the download read", inUse, rounds)
		if _, err := e.svc.Delete(ctx, e.team, keep.ID); err != nil {
			t.Fatal(err)
		}
		e.waitGone()
	})
}
