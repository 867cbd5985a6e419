package restore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
)

// The child side of TestKillDuringSwap: a process that restores and is
// killed.
func TestRestoreChild(t *testing.T) {
	dir, storeURL, key := os.Getenv("KILN_SNAPSHOT_CHILD_ROOT"), os.Getenv("KILN_SNAPSHOT_CHILD_STORE"), os.Getenv("KILN_SNAPSHOT_CHILD_KEY")
	if dir == "" {
		t.Skip("the child of TestKillDuringSwap")
	}
	store, err := blob.Open(t.Context(), storeURL, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root, err := files.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(t.Context(), root, enginetest.Unlimited(t), store, key, Options{Only: os.Getenv("KILN_SNAPSHOT_CHILD_ONLY")}); err != nil {
		t.Fatal(err)
	}
}

// TestKillDuringSwap kills (SIGKILL) a real process restoring a tree in
// the middle of its swap (once 100 of the 3,000 extra entries went to the
// trash), then runs Recover: the tree is the snapshot's. The test logs
// where the kill landed.
func TestKillDuringSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	t.Run("whole", func(t *testing.T) { killDuringSwap(t, "") })
	// A restore of one directory: the entries beside it (another
	// directory whose files differ from the snapshot's, a file) stay as
	// they were, through the kill and Recover.
	t.Run("one path", func(t *testing.T) { killDuringSwap(t, "w") })
}

func killDuringSwap(t *testing.T, only string) {
	in := func(name string) string {
		if only == "" {
			return name
		}
		return only + "/" + name
	}
	snap := enginetest.NewTree(t)
	for i := range 3000 {
		snap.File(in(fmt.Sprintf("f%04d", i)), fmt.Appendf(nil, "snapshot %d", i), 0o644)
	}
	// Files the live tree holds with the same content and another mode:
	// kept in place, a keep step each (after the kill, run by Recover).
	for i := range 500 {
		snap.File(in(fmt.Sprintf("same%04d", i)), fmt.Appendf(nil, "same %d", i), 0o644)
	}
	if only != "" {
		for i := range 200 {
			snap.File(fmt.Sprintf("o/f%03d", i), []byte("the snapshot's, not restored"), 0o644)
		}
	}
	snap.StampDirs()
	want := enginetest.State(t, snap.Dir)
	storeDir := t.TempDir()
	store, err := blob.Open(t.Context(), "file://"+storeDir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := enginetest.Create(t, enginetest.OpenRoot(t, snap.Dir), store, engine.CreateOptions{})

	live := enginetest.NewTree(t)
	for i := range 3000 {
		live.File(in(fmt.Sprintf("f%04d", i)), fmt.Appendf(nil, "live %d", i), 0o600)
		live.File(in(fmt.Sprintf("extra%04d", i)), []byte("removed"), 0o644)
	}
	for i := range 500 {
		live.File(in(fmt.Sprintf("same%04d", i)), fmt.Appendf(nil, "same %d", i), 0o600)
	}
	if only != "" {
		for i := range 200 {
			live.File(fmt.Sprintf("o/f%03d", i), []byte("live, kept"), 0o600)
		}
		live.File("server.properties", []byte("live, kept"), 0o600)
		// What the tree must be after: the snapshot's under the path,
		// the live tree's elsewhere (the directory leading to the path,
		// the root, has the snapshot's mode and mtime anyway).
		outside := enginetest.State(t, live.Dir)
		for p, d := range outside {
			if p != only && !strings.HasPrefix(p, only+"/") {
				want[p] = d
			}
		}
		for p := range want {
			if _, ok := outside[p]; !ok && p != only && !strings.HasPrefix(p, only+"/") {
				delete(want, p)
			}
		}
	}
	sameIno := inodes(t, live.Dir)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRestoreChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KILN_SNAPSHOT_CHILD_ROOT="+live.Dir,
		"KILN_SNAPSHOT_CHILD_STORE=file://"+storeDir, "KILN_SNAPSHOT_CHILD_KEY="+res.ManifestKey, "KILN_SNAPSHOT_CHILD_ONLY="+only)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	deadline := time.Now().Add(60 * time.Second)
wait:
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Logf("the child finished before the kill (%v)", err)
			break wait
		default:
		}
		// Mid-swap: the journal is in place and the first steps (the
		// extra entries, first in name order, go to the trash) are done.
		if trash, _ := filepath.Glob(filepath.Join(live.Dir, restorePrefix+"*", stageTrash, "*")); len(trash) >= 100 {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			killed = true
			break
		}
		time.Sleep(200 * time.Microsecond) // polling the child's progress, not waiting for time
	}
	mid := enginetest.State(t, live.Dir)
	pending, swapped, extras := 0, 0, 0
	for p, d := range mid {
		if strings.HasPrefix(p, in("extra")) {
			extras++
		}
		if strings.HasPrefix(p, restorePrefix) && strings.HasSuffix(p, "/"+journalName) {
			pending++
		}
		if want[p] == d {
			swapped++
		}
	}
	t.Logf("killed: %v; journal left: %d; at the kill, %d of 3000 extra entries were left and %d of %d entries were the snapshot's",
		killed, pending, extras, swapped, len(want))

	got, err := Recover(t.Context(), enginetest.OpenRoot(t, live.Dir), enginetest.Names())
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	t.Logf("Recover = %+v", got)
	if d := enginetest.DiffState(want, enginetest.State(t, live.Dir)); d != "" {
		t.Errorf("after the kill and Recover, the tree differs:\n%.2000s", d)
	}
	for p, ino := range inodes(t, live.Dir) {
		if strings.HasPrefix(p, in("same")) && ino != sameIno[p] {
			t.Errorf("%s was rewritten; its content is the snapshot's", p)
		}
	}
}
