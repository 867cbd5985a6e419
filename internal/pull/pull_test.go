package pull_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/netguard/netguardtest"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

func TestDownloadWithContentLength(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/file/paper-1.21.jar?token=x", "/plugins/sub", "")
		if !ids.HasPrefix(d.ID, pull.IDPrefix) || d.Status != pull.StatusQueued || d.Filename != "paper-1.21.jar" ||
			d.Directory != "/plugins/sub" || d.TeamID != teamA || d.ServerID != serverA || d.CreatedAt == 0 || d.FinishedAt != 0 {
			t.Errorf("Start = %+v, want a queued dl_ record for /plugins/sub/paper-1.21.jar", d)
		}
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if got.Status != pull.StatusDone || got.Progress() != 100 || got.Size != dataLen || got.Written != dataLen ||
			got.Error != "" || got.FinishedAt == 0 || got.URL != up.URL+"/file/paper-1.21.jar?token=x" {
			t.Errorf("finished download = %+v (progress %v), want done, 100, %d bytes", got, got.Progress(), dataLen)
		}
		p := filepath.Join(e.roots.dir(serverA), "plugins", "sub", "paper-1.21.jar")
		if b := readFile(t, p); string(b) != string(up.data) {
			t.Errorf("%s holds %d bytes, not the %d bytes served", p, len(b), len(up.data))
		}
		if w, want := e.roots.wroteFor(serverA), quota.Cost(dataLen)+2*quota.EntryCost; w != want {
			t.Errorf("disk ledger of %s = %d, want %d (the file and its two new directories)", serverA, w, want)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		assertEmptyTree(t, e.roots.dir(serverA)) // no temporary file either
		list, err := e.m.List(t.Context(), teamA, serverA)
		if err != nil || len(list) != 1 || list[0].ID != d.ID || list[0].Status != pull.StatusDone {
			t.Errorf("List = %+v, %v; want the one done download", list, err)
		}
	})
}

func TestProgressWithContentLength(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/half/a.bin", "", "")
		mid := e.waitFor(t, teamA, serverA, d.ID, "half received", func(d pull.Download) bool { return d.Written == dataLen/2 })
		if mid.Status != pull.StatusRunning || mid.Size != dataLen || mid.Progress() != 50 {
			t.Errorf("half way: %+v, progress %v; want running, size %d, progress 50", mid, mid.Progress(), dataLen)
		}
		// The partial file is the download's temporary file, not the target.
		dir := e.roots.dir(serverA)
		if _, err := os.Stat(filepath.Join(dir, quota.TempNames{}.Name(d.ID))); err != nil {
			t.Errorf("partial file: %v, want %s present", err, quota.TempNames{}.Name(d.ID))
		}
		if _, err := os.Stat(filepath.Join(dir, "a.bin")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a.bin before completion: %v, want it absent", err)
		}
		close(up.release)
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if got.Status != pull.StatusDone || got.Progress() != 100 {
			t.Errorf("finished: %+v, progress %v; want done, 100", got, got.Progress())
		}
		if b := readFile(t, filepath.Join(dir, "a.bin")); string(b) != string(up.data) {
			t.Errorf("a.bin holds %d bytes, not the %d served", len(b), len(up.data))
		}
	})
}

func TestDownloadWithoutContentLength(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/hang/5000", "/", "x.bin")
		mid := e.waitFor(t, teamA, serverA, d.ID, "5000 bytes received", func(d pull.Download) bool { return d.Written == 5000 })
		if mid.Size != 0 || mid.Progress() != 0 {
			t.Errorf("without Content-Length: size %d, progress %v; want 0, 0", mid.Size, mid.Progress())
		}
		close(up.release)
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if got.Status != pull.StatusDone || got.Size != 6000 || got.Written != 6000 || got.Progress() != 100 {
			t.Errorf("finished: %+v, progress %v; want done with size 6000, progress 100", got, got.Progress())
		}
		want := string(payload(5000)) + string(payload(1000))
		if b := readFile(t, filepath.Join(e.roots.dir(serverA), "x.bin")); string(b) != want {
			t.Errorf("x.bin holds %d bytes, want the 6000 served", len(b))
		}

		d = e.mustStart(t, serverA, up.URL+"/chunked/100000", "/", "y.bin")
		if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone || got.Size != 100000 {
			t.Errorf("chunked: %+v, want done with size 100000", got)
		}
	})
}

func TestActiveLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		var started []pull.Download
		for i := range pull.MaxActive {
			started = append(started, e.mustStart(t, serverA, up.URL+"/hang/10", "/", fmt.Sprintf("f%d", i)))
		}
		if _, err := e.m.Start(t.Context(), teamA, serverA, up.URL+"/hang/10", "/", "f3"); !errors.Is(err, pull.ErrTooMany) {
			t.Fatalf("4th Start = %v, want ErrTooMany", err)
		}
		// Another server is not affected.
		e.mustStart(t, server2, up.URL+"/hang/10", "/", "other")
		// Once one ends, there is room again.
		if got, err := e.m.Cancel(t.Context(), teamA, serverA, started[0].ID); err != nil || got.Status != pull.StatusCanceled {
			t.Fatalf("Cancel = %+v, %v; want canceled", got, err)
		}
		e.mustStart(t, serverA, up.URL+"/hang/10", "/", "f3")
	})
}

func TestActiveLimitConcurrent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ok, refused int
		for i := range 8 {
			wg.Go(func() {
				_, err := e.m.Start(t.Context(), teamA, serverA, up.URL+"/hang/10", "/", fmt.Sprintf("f%d", i))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, pull.ErrTooMany):
					refused++
				default:
					t.Errorf("Start = %v", err)
				}
			})
		}
		wg.Wait()
		if ok != pull.MaxActive || refused != 8-pull.MaxActive {
			t.Errorf("8 concurrent Starts: %d accepted, %d refused; want %d and %d", ok, refused, pull.MaxActive, 8-pull.MaxActive)
		}
	})
}

func TestCancel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		dir := e.roots.dir(serverA)
		d := e.mustStart(t, serverA, up.URL+"/hang/3000", "/plugins", "big.jar")
		e.waitFor(t, teamA, serverA, d.ID, "3000 bytes received", func(d pull.Download) bool { return d.Written == 3000 })
		partial := filepath.Join(dir, "plugins", quota.TempNames{}.Name(d.ID))
		if _, err := os.Stat(partial); err != nil {
			t.Fatalf("partial file during the transfer: %v", err)
		}
		got, err := e.m.Cancel(t.Context(), teamA, serverA, d.ID)
		if err != nil || got.Status != pull.StatusCanceled || got.Error != "" || got.FinishedAt == 0 {
			t.Fatalf("Cancel = %+v, %v; want canceled without error", got, err)
		}
		// Stored, not only answered.
		if again, err := e.m.Get(t.Context(), teamA, serverA, d.ID); err != nil || again.Status != pull.StatusCanceled {
			t.Errorf("Get after Cancel = %+v, %v; want canceled", again, err)
		}
		assertEmptyTree(t, dir)
		// Cancelling again changes nothing.
		if again, err := e.m.Cancel(t.Context(), teamA, serverA, d.ID); err != nil || again.Status != pull.StatusCanceled {
			t.Errorf("second Cancel = %+v, %v; want canceled, nil", again, err)
		}
		// Cancelling a finished download keeps its file.
		done := e.mustStart(t, serverA, up.URL+"/file/keep.jar", "/", "")
		e.waitFinished(t, teamA, serverA, done.ID)
		if got, err := e.m.Cancel(t.Context(), teamA, serverA, done.ID); err != nil || got.Status != pull.StatusDone {
			t.Errorf("Cancel of a done download = %+v, %v; want it done, nil", got, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "keep.jar")); err != nil {
			t.Errorf("keep.jar after Cancel of its finished download: %v", err)
		}
	})
}

func TestUpstreamStatus(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/missing", "/", "x.jar")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if want := "the server answered HTTP 404 Not Found"; got.Status != pull.StatusFailed || got.Error != want {
			t.Errorf("download of a 404 = %q, %q; want failed, %q", got.Status, got.Error, want)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
	})
}

func TestDiskLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		e.roots.setLimit(serverA, 16384) // four blocks
		for _, tc := range []struct{ name, path, want string }{
			{"streamed past the limit", "/chunked/50000", "the server's disk limit would be exceeded"},
			{"Content-Length over the limit", "/sized/50000", "the file (50000 bytes) is larger than the server's free disk space (16384 bytes)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := e.mustStart(t, serverA, up.URL+tc.path, "/", "big.bin")
				got := e.waitFinished(t, teamA, serverA, d.ID)
				if got.Status != pull.StatusFailed || !strings.Contains(got.Error, tc.want) {
					t.Errorf("download of 50000 bytes into 16384 = %q, %q; want failed, %q", got.Status, got.Error, tc.want)
				}
				assertEmptyTree(t, e.roots.dir(serverA))
			})
		}
		// Exactly the limit fits.
		d := e.mustStart(t, serverA, up.URL+"/chunked/16384", "/", "fits.bin")
		if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone {
			t.Errorf("download of 16384 bytes into 16384 = %+v, want done", got)
		}
	})
}

// Concurrent downloads into one server share its free space.
func TestDiskLimitShared(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		e.roots.setLimit(serverA, 16384)
		first := e.mustStart(t, serverA, up.URL+"/hang/8192", "/", "a.bin")
		e.waitFor(t, teamA, serverA, first.ID, "8192 bytes received", func(d pull.Download) bool { return d.Written == 8192 })
		second := e.mustStart(t, serverA, up.URL+"/chunked/12288", "/", "b.bin")
		got := e.waitFinished(t, teamA, serverA, second.ID)
		if got.Status != pull.StatusFailed || !strings.Contains(got.Error, "disk limit") {
			t.Errorf("second download of 12288 bytes while 8192 of 16384 are in flight = %q, %q; want failed on the disk limit", got.Status, got.Error)
		}
		if _, err := e.m.Cancel(t.Context(), teamA, serverA, first.ID); err != nil {
			t.Fatal(err)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
		// The canceled download's bytes are free again.
		third := e.mustStart(t, serverA, up.URL+"/chunked/16000", "/", "c.bin")
		if got := e.waitFinished(t, teamA, serverA, third.ID); got.Status != pull.StatusDone {
			t.Errorf("download of 16000 bytes after the others ended = %+v, want done", got)
		}
	})
}

// Replacing a file may use the space the old one frees.
func TestReplaceCountsOldSize(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		e.roots.setLimit(serverA, 16384)
		dir := e.roots.dir(serverA)
		if err := os.WriteFile(filepath.Join(dir, "x.bin"), make([]byte, 12000), 0o644); err != nil {
			t.Fatal(err)
		}
		d := e.mustStart(t, serverA, up.URL+"/sized/15000", "/", "x.bin")
		if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone {
			t.Fatalf("replacing 12000 bytes by 15000 under a 16384 limit = %+v, want done", got)
		}
		if b := readFile(t, filepath.Join(dir, "x.bin")); string(b) != string(payload(15000)) {
			t.Errorf("x.bin holds %d bytes, want the 15000 served", len(b))
		}
		if w := e.roots.wroteFor(serverA); w != 16384 {
			t.Errorf("disk ledger = %d, want 16384 (15000 bytes in 4 blocks replaced 12000 in 3)", w)
		}
	})
}

func TestRedirectToBlockedAddress(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		rec := netguardtest.Listen(t, "127.0.0.2:0")
		target := fmt.Sprintf("http://127.0.0.2:%d/secret", rec.Port())
		d := e.mustStart(t, serverA, up.URL+"/redirect?to="+url.QueryEscape(target), "/", "x")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		want := "127.0.0.2 is an address downloads may not reach: 127.0.0.0/8 (loopback"
		if got.Status != pull.StatusFailed || !strings.Contains(got.Error, want) {
			t.Errorf("redirect to %s = %q, %q; want failed, %q…", target, got.Status, got.Error, want)
		}
		rec.AssertNoConnection(t)
		assertEmptyTree(t, e.roots.dir(serverA))
	})
}

func TestHostnames(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		rec := netguardtest.Listen(t, "127.0.0.3:0")
		d := e.mustStart(t, serverA, fmt.Sprintf("http://evil.test:%d/x.jar", rec.Port()), "/", "")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		want := `evil.test resolves to 127.0.0.3, an address downloads may not reach: 127.0.0.0/8 (loopback`
		if got.Status != pull.StatusFailed || !strings.Contains(got.Error, want) {
			t.Errorf("download from evil.test = %q, %q; want failed, %q…", got.Status, got.Error, want)
		}
		rec.AssertNoConnection(t)

		// A name that resolves to an allowed address works.
		port := up.Listener.Addr().(*net.TCPAddr).Port
		d = e.mustStart(t, serverA, fmt.Sprintf("http://files.test:%d/file/ok.jar", port), "/", "")
		if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone {
			t.Errorf("download from files.test (127.0.0.1) = %+v, want done", got)
		}
	})
}

func TestTooManyRedirects(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/hops/6", "/", "x")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if want := "the server redirected more than 5 times"; got.Status != pull.StatusFailed || got.Error != want {
			t.Errorf("6 redirects = %q, %q; want failed, %q", got.Status, got.Error, want)
		}
		d = e.mustStart(t, serverA, up.URL+"/hops/5", "/", "y")
		if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone {
			t.Errorf("5 redirects = %+v, want done", got)
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{IdleTimeout: 200 * time.Millisecond})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/hang/100", "/", "x")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if want := "no data received for 200ms"; got.Status != pull.StatusFailed || got.Error != want {
			t.Errorf("stalled download = %q, %q; want failed, %q", got.Status, got.Error, want)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
	})
}

// A kill -9 leaves rows queued or running and a partial file: the next
// process fails them and removes the file.
func TestRecoveryAfterCrash(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		if err := e.stop(); err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		dir := e.roots.dir(serverA)
		running, queued, done := ids.New("dl"), ids.New("dl"), ids.New("dl")
		finishedAt := time.Now().Add(-time.Minute).UnixMilli()
		for _, r := range []struct {
			id, directory, status string
			finished              any
		}{
			{running, "/plugins", "running", nil},
			{queued, "/", "queued", nil},
			{done, "/", "done", finishedAt},
		} {
			_, err := db.Write().ExecContext(ctx, `INSERT INTO downloads
				(id, team_id, server_id, url, directory, filename, status, size, written, error, created_at, updated_at, finished_at)
				VALUES ($1, $2, $3, 'http://example.com/x', $4, 'x', $5, 1000, 500, NULL, 1, 1, $6)`,
				r.id, teamA, serverA, r.directory, r.status, r.finished)
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(dir, "plugins", quota.TempNames{}.Name(running)), filepath.Join(dir, quota.TempNames{}.Name(queued))} {
			if err := os.WriteFile(p, make([]byte, 500), 0o644); err != nil {
				t.Fatal(err)
			}
		}

		e.start(t, pull.Options{}) // the next kiln serve
		for _, id := range []string{running, queued} {
			got, err := e.m.Get(ctx, teamA, serverA, id)
			if want := "interrupted: kiln serve stopped during the download"; err != nil || got.Status != pull.StatusFailed || got.Error != want || got.FinishedAt == 0 {
				t.Errorf("after restart %s = %+v, %v; want failed, %q", id, got, err, want)
			}
		}
		if got, err := e.m.Get(ctx, teamA, serverA, done); err != nil || got.Status != pull.StatusDone || got.FinishedAt != finishedAt {
			t.Errorf("after restart, the done download = %+v, %v; want it unchanged", got, err)
		}
		assertEmptyTree(t, dir)
	})
}

// Stopping kiln serve fails what runs and removes the partial files.
func TestShutdown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/hang/2000", "/plugins", "x.jar")
		e.waitFor(t, teamA, serverA, d.ID, "2000 bytes received", func(d pull.Download) bool { return d.Written == 2000 })
		if err := e.stop(); err != nil {
			t.Fatalf("Run = %v", err)
		}
		got, err := e.m.Get(t.Context(), teamA, serverA, d.ID)
		if want := "interrupted: kiln serve stopped during the download"; err != nil || got.Status != pull.StatusFailed || got.Error != want {
			t.Errorf("after shutdown = %+v, %v; want failed, %q", got, err, want)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
		if _, err := e.m.Start(t.Context(), teamA, serverA, up.URL+"/file/a.jar", "/", ""); !errors.Is(err, pull.ErrClosed) {
			t.Errorf("Start after shutdown = %v, want ErrClosed", err)
		}
	})
}

func TestScoping(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		ctx := t.Context()
		d := e.mustStart(t, serverA, up.URL+"/hang/10", "/", "x")
		for _, tc := range []struct {
			name, team, server, id string
			want                   error
		}{
			{"another team's server", teamB, serverA, d.ID, servers.ErrNotFound},
			{"own server, another team's download", teamB, serverB, d.ID, pull.ErrNotFound},
			{"another server of the team", teamA, server2, d.ID, pull.ErrNotFound},
			{"unknown id", teamA, serverA, "dl_00000000000000000000", pull.ErrNotFound},
			{"unknown server", teamA, "00000000-0000-4000-8000-000000000fff", d.ID, servers.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := e.m.Cancel(ctx, tc.team, tc.server, tc.id); !errors.Is(err, tc.want) {
					t.Errorf("Cancel(%s, %s, %s) = %v, want %v", tc.team, tc.server, tc.id, err, tc.want)
				}
				if _, err := e.m.Get(ctx, tc.team, tc.server, tc.id); !errors.Is(err, tc.want) {
					t.Errorf("Get(%s, %s, %s) = %v, want %v", tc.team, tc.server, tc.id, err, tc.want)
				}
			})
		}
		if _, err := e.m.List(ctx, teamB, serverA); !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("List of another team's server = %v, want servers.ErrNotFound", err)
		}
		if _, err := e.m.Start(ctx, teamB, serverA, up.URL+"/file/a", "/", ""); !errors.Is(err, servers.ErrNotFound) {
			t.Errorf("Start on another team's server = %v, want servers.ErrNotFound", err)
		}
		for _, srv := range []string{server2} {
			if list, err := e.m.List(ctx, teamA, srv); err != nil || len(list) != 0 {
				t.Errorf("List(%s) = %+v, %v; want empty", srv, list, err)
			}
		}
		if list, err := e.m.List(ctx, teamB, serverB); err != nil || len(list) != 0 {
			t.Errorf("List(team B) = %+v, %v; want empty", list, err)
		}
		// Still running after all that.
		if got, err := e.m.Get(ctx, teamA, serverA, d.ID); err != nil || !got.Status.Active() {
			t.Errorf("download after foreign cancels = %+v, %v; want it active", got, err)
		}
	})
}

func TestValidation(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, pull.Options{})
	ok := "http://127.0.0.1:9/x.jar"
	for _, tc := range []struct {
		name, url, dir, file string
		want                 []string // issue paths
	}{
		{"no url", "", "/", "x", []string{"url"}},
		{"ftp", "ftp://127.0.0.1/x", "/", "", []string{"url"}},
		{"file", "file:///etc/passwd", "/", "", []string{"url"}},
		{"user info", "http://user:pw@127.0.0.1/x", "/", "", []string{"url"}},
		{"too long", "http://127.0.0.1/" + strings.Repeat("a", pull.MaxURLLen), "/", "", []string{"url"}},
		{"no host", "http:///x.jar", "/", "", []string{"url"}},
		{"opaque", "http:x.jar", "/", "", []string{"url"}},
		{"unparsable", "http://[::1/x", "/", "x", []string{"url"}},
		{"relative", "/x.jar", "/", "", []string{"url"}},
		{"directory ..", ok, "../x", "", []string{"directory"}},
		{"directory inner ..", ok, "/plugins/../../x", "", []string{"directory"}},
		{"directory NUL", ok, "/a\x00b", "", []string{"directory"}},
		{"filename ..", ok, "/", "../x", []string{"filename"}},
		{"filename absolute", ok, "/", "/etc", []string{"filename"}},
		{"filename nested", ok, "/", "a/b", []string{"filename"}},
		{"filename NUL", ok, "/", "a\x00", []string{"filename"}},
		{"filename dot", ok, "/", ".", []string{"filename"}},
		{"filename dotdot", ok, "/", "..", []string{"filename"}},
		{"filename temporary", ok, "/", quota.TempPrefix + "dl_x", []string{"filename"}},
		{"filename too long", ok, "/", strings.Repeat("a", 256), []string{"filename"}},
		{"no name in url", "http://127.0.0.1/dir/", "/", "", []string{"filename"}},
		{"no path in url", "http://127.0.0.1", "/", "", []string{"filename"}},
		{"url name ..", "http://127.0.0.1/%2e%2e", "/", "", []string{"filename"}},
		{"url name NUL", "http://127.0.0.1/a%00b", "/", "", []string{"filename"}},
		{"url name with escaped slash", "http://127.0.0.1/a%2Fb", "/", "", []string{"filename"}},
		{"everything", "gopher://x", "../", "a/b", []string{"url", "directory", "filename"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.Start(t.Context(), teamA, serverA, tc.url, tc.dir, tc.file)
			ve, isVE := errors.AsType[*validate.Error](err)
			if !isVE {
				t.Fatalf("Start(%q, %q, %q) = %v, want a *validate.Error", tc.url, tc.dir, tc.file, err)
			}
			var paths []string
			for _, i := range ve.Issues {
				paths = append(paths, i.Path)
			}
			if !slices.Equal(paths, tc.want) {
				t.Errorf("Start(%q, %q, %q) issues at %q (%v), want %q", tc.url, tc.dir, tc.file, paths, err, tc.want)
			}
		})
	}
	if list, err := e.m.List(t.Context(), teamA, serverA); err != nil || len(list) != 0 {
		t.Errorf("List after refused Starts = %+v, %v; want nothing recorded", list, err)
	}
}

// A directory that looks absolute is inside the server's root.
func TestDirectoryIsServerRelative(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, pull.Options{})
	up := newUpstream(t)
	d := e.mustStart(t, serverA, up.URL+"/file/passwd", "/etc", "")
	if got := e.waitFinished(t, teamA, serverA, d.ID); got.Status != pull.StatusDone || got.File() != "/etc/passwd" {
		t.Fatalf("download into /etc = %+v, want done at /etc/passwd", got)
	}
	if b := readFile(t, filepath.Join(e.roots.dir(serverA), "etc", "passwd")); string(b) != string(up.data) {
		t.Errorf("<root>/etc/passwd holds %d bytes, want the %d served", len(b), len(up.data))
	}
}

// List shows what is active and what finished within the hour, newest
// first; Run deletes finished rows after the retention.
func TestListWindowAndPrune(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		clock := &fakeClock{now: time.UnixMilli(1_700_000_000_000)}
		e := newEnv(t, db, pull.Options{Now: clock.Now})
		up := newUpstream(t)
		ctx := t.Context()
		done := e.mustStart(t, serverA, up.URL+"/file/a.jar", "/", "")
		e.waitFinished(t, teamA, serverA, done.ID)
		clock.Advance(time.Second)
		active := e.mustStart(t, serverA, up.URL+"/hang/10", "/", "b.jar")
		list, err := e.m.List(ctx, teamA, serverA)
		if err != nil || len(list) != 2 || list[0].ID != active.ID || list[1].ID != done.ID {
			t.Fatalf("List = %+v, %v; want [active, done]", list, err)
		}
		clock.Advance(pull.ListWindow + time.Minute)
		list, err = e.m.List(ctx, teamA, serverA)
		if err != nil || len(list) != 1 || list[0].ID != active.ID {
			t.Fatalf("List an hour later = %+v, %v; want only the active download", list, err)
		}
		if err := e.stop(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(24 * time.Hour)
		e.start(t, pull.Options{Now: clock.Now}) // prunes at start
		var n int
		if err := db.Read().QueryRowContext(ctx, `SELECT count(*) FROM downloads WHERE id = $1`, done.ID).Scan(&n); err != nil || n != 0 {
			t.Errorf("rows of a download finished 25 h ago = %d, %v; want it pruned", n, err)
		}
		if err := db.Read().QueryRowContext(ctx, `SELECT count(*) FROM downloads WHERE id = $1`, active.ID).Scan(&n); err != nil || n != 1 {
			t.Errorf("rows of a download finished 24 h ago = %d, %v; want it kept", n, err)
		}
	})
}

func TestProgress(t *testing.T) {
	for _, tc := range []struct {
		d    pull.Download
		want float64
	}{
		{pull.Download{Status: pull.StatusRunning}, 0},
		{pull.Download{Status: pull.StatusRunning, Written: 10}, 0},
		{pull.Download{Status: pull.StatusRunning, Size: 3, Written: 1}, 33.3},
		{pull.Download{Status: pull.StatusRunning, Size: 1000, Written: 999}, 99.9},
		{pull.Download{Status: pull.StatusRunning, Size: 10, Written: 10}, 99.9},
		{pull.Download{Status: pull.StatusDone, Size: 0, Written: 0}, 100},
		{pull.Download{Status: pull.StatusFailed, Size: 10, Written: 5}, 50},
	} {
		if got := tc.d.Progress(); got != tc.want {
			t.Errorf("%+v.Progress() = %v, want %v", tc.d, got, tc.want)
		}
	}
}

// A Cancel made by another kiln serve sharing the database (it finds no
// transfer of its own, so it only changes the row and removes the partial
// file) stops the transfer at the owner's next progress write, even while
// the upstream sends nothing.
func TestCancelFromAnotherProcess(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{ProgressInterval: 20 * time.Millisecond})
		up := newUpstream(t)
		owner := e.m
		e.start(t, pull.Options{}) // the other process, started before the download exists
		other := e.m
		d, err := owner.Start(t.Context(), teamA, serverA, up.URL+"/hang/3000", "/", "x.jar")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := owner.Get(t.Context(), teamA, serverA, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Written == 3000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("3000 bytes not received within 30s: %+v", got)
			}
			time.Sleep(5 * time.Millisecond)
		}
		got, err := other.Cancel(t.Context(), teamA, serverA, d.ID)
		if err != nil || got.Status != pull.StatusCanceled {
			t.Fatalf("Cancel from the other process = %+v, %v; want canceled", got, err)
		}
		select {
		case <-up.ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the owner's request did not end within 30s of the cancel")
		}
		// The owner's transfer ends without overwriting the status.
		deadline = time.Now().Add(30 * time.Second)
		for owner.InFlight() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the owner still runs a transfer 30s after the cancel")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got, err := owner.Get(t.Context(), teamA, serverA, d.ID); err != nil || got.Status != pull.StatusCanceled || got.Error != "" {
			t.Errorf("after the owner stopped = %+v, %v; want canceled", got, err)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
	})
}

// Beyond MaxRunning transfers, downloads wait as queued; a queued one can
// be canceled before it connects.
func TestQueued(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{MaxRunning: 1})
		up := newUpstream(t)
		first := e.mustStart(t, serverA, up.URL+"/hang/10", "/", "a")
		e.waitFor(t, teamA, serverA, first.ID, "running", func(d pull.Download) bool { return d.Written == 10 })
		second := e.mustStart(t, server2, up.URL+"/file/b.jar", "/", "")
		if got, err := e.m.Get(t.Context(), teamA, server2, second.ID); err != nil || got.Status != pull.StatusQueued {
			t.Fatalf("second download with one slot taken = %+v, %v; want queued", got, err)
		}
		if got, err := e.m.Cancel(t.Context(), teamA, server2, second.ID); err != nil || got.Status != pull.StatusCanceled {
			t.Fatalf("Cancel of the queued download = %+v, %v; want canceled", got, err)
		}
		third := e.mustStart(t, server2, up.URL+"/file/c.jar", "/", "")
		close(up.release)
		for _, d := range []pull.Download{first, third} {
			if got := e.waitFinished(t, teamA, d.ServerID, d.ID); got.Status != pull.StatusDone {
				t.Errorf("download %s after the slot freed = %+v, want done", d.Filename, got)
			}
		}
		// A transfer records its outcome, then leaves the in-flight set.
		deadline := time.Now().Add(30 * time.Second)
		for e.m.InFlight() != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := e.m.InFlight(); n != 0 {
			t.Errorf("InFlight = %d after everything finished, want 0", n)
		}
	})
}

func TestCancelServer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{})
		up := newUpstream(t)
		a := e.mustStart(t, serverA, up.URL+"/hang/10", "/", "a")
		b := e.mustStart(t, serverA, up.URL+"/hang/10", "/", "b")
		other := e.mustStart(t, server2, up.URL+"/hang/10", "/", "c")
		for _, d := range []pull.Download{a, b} {
			e.waitFor(t, teamA, serverA, d.ID, "running", func(d pull.Download) bool { return d.Written == 10 })
		}
		if err := e.m.CancelServer(t.Context(), serverA); err != nil {
			t.Fatal(err)
		}
		for _, d := range []pull.Download{a, b} {
			if got, err := e.m.Get(t.Context(), teamA, serverA, d.ID); err != nil || got.Status != pull.StatusCanceled {
				t.Errorf("after CancelServer, %s = %+v, %v; want canceled", d.Filename, got, err)
			}
		}
		assertEmptyTree(t, e.roots.dir(serverA))
		if got, err := e.m.Get(t.Context(), teamA, server2, other.ID); err != nil || !got.Status.Active() {
			t.Errorf("another server's download = %+v, %v; want it still active", got, err)
		}
		// The table follows the server's row.
		if _, err := db.Write().ExecContext(t.Context(), `DELETE FROM servers WHERE id = $1`, serverA); err != nil {
			t.Fatalf("delete server with downloads: %v", err)
		}
		var n int
		if err := db.Read().QueryRowContext(t.Context(), `SELECT count(*) FROM downloads WHERE server_id = $1`, serverA).Scan(&n); err != nil || n != 0 {
			t.Errorf("downloads of a deleted server = %d, %v; want 0", n, err)
		}
	})
}

// TestMinimumRate: an upstream that sends too little for too long fails
// the download (and gives its slot back) long before the idle timeout.
func TestMinimumRate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{MinRate: 1 << 20, MinRateWindow: 300 * time.Millisecond, IdleTimeout: time.Minute})
		up := newUpstream(t)
		d := e.mustStart(t, serverA, up.URL+"/hang/100", "/", "x")
		got := e.waitFinished(t, teamA, serverA, d.ID)
		if want := "the server sent less than 1048576 bytes a second for 300ms"; got.Status != pull.StatusFailed || got.Error != want {
			t.Errorf("trickling download = %q, %q; want failed, %q", got.Status, got.Error, want)
		}
		assertEmptyTree(t, e.roots.dir(serverA))
	})
}

// TestRunningCappedPerTeam: one team's downloads beyond its share wait
// queued while another team's run through.
func TestRunningCappedPerTeam(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, pull.Options{MaxRunningPerTeam: 1})
		up := newUpstream(t)
		first := e.mustStart(t, serverA, up.URL+"/hang/100", "/", "a")
		e.waitFor(t, teamA, serverA, first.ID, "running", func(d pull.Download) bool { return d.Status == pull.StatusRunning })
		second := e.mustStart(t, server2, up.URL+"/sized/100", "/", "b")
		other, err := e.m.Start(t.Context(), teamB, serverB, up.URL+"/sized/100", "/", "c")
		if err != nil {
			t.Fatal(err)
		}
		if got := e.waitFinished(t, teamB, serverB, other.ID); got.Status != pull.StatusDone {
			t.Fatalf("the other team's download = %+v, want done", got)
		}
		if got, err := e.m.Get(t.Context(), teamA, server2, second.ID); err != nil || got.Status != pull.StatusQueued {
			t.Errorf("team A's second download while its first runs = %+v, %v; want queued", got, err)
		}
		if _, err := e.m.Cancel(t.Context(), teamA, serverA, first.ID); err != nil {
			t.Fatal(err)
		}
		if got := e.waitFinished(t, teamA, server2, second.ID); got.Status != pull.StatusDone {
			t.Errorf("team A's second download after the first ended = %+v, want done", got)
		}
	})
}
