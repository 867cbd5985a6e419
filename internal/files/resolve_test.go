package files

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/quota"
)

const outsideSecret = "S3CRET-OUTSIDE-THE-ROOT"

// escapeRoot makes a root beside an "outside" directory holding a secret,
// planted with the links a game server could make: out of the root by a
// relative and an absolute target, to the root by its absolute host path,
// inside by a relative one, through ".." that stays inside, a loop, and a
// dangling link whose target would be created outside.
func escapeRoot(t *testing.T) (r *Root, root, outside string) {
	t.Helper()
	base := t.TempDir()
	outside = filepath.Join(base, "outside")
	root = filepath.Join(base, "root")
	for _, d := range []string{outside, filepath.Join(root, "inner", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, outside, "secret", outsideSecret)
	write(t, root, "inner/ok.txt", "inside")
	write(t, root, "inner/deep/ok.txt", "deep inside")
	for link, target := range map[string]string{
		"up":               "..",
		"abs":              "/",
		"hostpath":         filepath.Join(root, "inner"),
		"dirlink":          "inner",
		"inner/back":       "../inner",
		"inner/rel-escape": "../../outside/secret",
		"inner/updir":      "../..",
		"loop":             "loop",
		"dangling":         "../outside/created-through-a-link",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if r, err = Open(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, root, outside
}

// resolvers runs fn once with openat2 (when this kernel has it) and once
// with the os.Root walk that replaces it where it is missing.
func resolvers(t *testing.T, fn func(t *testing.T, r *Root, root, outside string)) {
	t.Run("openat2", func(t *testing.T) {
		r, root, outside := escapeRoot(t)
		if !r.beneath {
			t.Skip("SKIP: openat2(RESOLVE_BENEATH) is not available here (Linux < 5.6 or a seccomp filter)")
		}
		fn(t, r, root, outside)
	})
	t.Run("walk", func(t *testing.T) {
		r, root, outside := escapeRoot(t)
		r.beneath = false
		fn(t, r, root, outside)
	})
}

// readFD reads what descriptor fd holds (and closes it).
func readFD(t *testing.T, fd int) string {
	t.Helper()
	f := os.NewFile(uintptr(fd), "fd")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOpenBeneath(t *testing.T) {
	resolvers(t, func(t *testing.T, r *Root, _, _ string) {
		for _, tc := range []struct {
			rel     string
			want    string // content read, when the open succeeds
			wantErr error
		}{
			{rel: "inner/ok.txt", want: "inside"},
			{rel: "dirlink/ok.txt", want: "inside"},
			{rel: "inner/back/deep/ok.txt", want: "deep inside"},
			{rel: "inner/back/back/ok.txt", want: "inside"},
			{rel: "up/outside/secret", wantErr: ErrNotFound},
			{rel: "abs/etc/passwd", wantErr: ErrNotFound},
			{rel: "hostpath/ok.txt", wantErr: ErrNotFound}, // absolute, even to inside
			{rel: "inner/rel-escape", wantErr: ErrNotFound},
			{rel: "inner/updir/outside/secret", wantErr: ErrNotFound},
			{rel: "loop", wantErr: ErrNotFound},
			{rel: "loop/x", wantErr: ErrNotFound},
			{rel: "missing", wantErr: ErrNotFound},
			{rel: "inner/ok.txt/x", wantErr: ErrNotDirectory},
		} {
			fd, err := r.openBeneath(tc.rel, unix.O_RDONLY, 0)
			if tc.wantErr != nil {
				if err == nil {
					t.Errorf("openBeneath(%q) opened %q, want %v", tc.rel, readFD(t, fd), tc.wantErr)
				} else if !errors.Is(err, tc.wantErr) {
					t.Errorf("openBeneath(%q) = %v, want %v", tc.rel, err, tc.wantErr)
				}
				continue
			}
			if err != nil {
				t.Errorf("openBeneath(%q) = %v, want %q", tc.rel, err, tc.want)
				continue
			}
			if got := readFD(t, fd); got != tc.want {
				t.Errorf("openBeneath(%q) read %q, want %q", tc.rel, got, tc.want)
			}
		}

		// O_NOFOLLOW: the last component itself, a link included.
		fd, err := r.openBeneath("inner/rel-escape", unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			t.Fatalf("openBeneath(link, O_PATH|O_NOFOLLOW) = %v", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("openBeneath(link, O_PATH|O_NOFOLLOW) opened mode %o (%v), want the link", st.Mode, err)
		}
		unix.Close(fd)

		// Directories, as every Root operation reaches them.
		for rel, wantErr := range map[string]error{
			".": nil, "inner": nil, "dirlink": nil, "inner/back/deep": nil,
			"up": ErrNotFound, "abs": ErrNotFound, "inner/updir": ErrNotFound, "inner/ok.txt": ErrNotDirectory,
		} {
			fd, err := r.openDir(rel)
			if !errors.Is(err, wantErr) {
				t.Errorf("openDir(%q) = %v, want %v", rel, err, wantErr)
			}
			if err == nil {
				unix.Close(fd)
			}
		}
	})
}

// TestOpenWriteStaysInside: the SFTP write seam creates, opens and
// truncates only inside the root, never through a link, never a FIFO, a
// directory or a hard-linked file, and keeps the ledger exact.
func TestOpenWriteStaysInside(t *testing.T) {
	resolvers(t, func(t *testing.T, r *Root, root, outside string) {
		disk := quota.NewAccount(1<<20, quota.TempNames{})
		create := WriteFlags{Create: true, Truncate: true}
		for _, tc := range []struct {
			rel     string
			fl      WriteFlags
			wantErr error
		}{
			{"up/outside/new", create, ErrNotFound},
			{"abs/tmp/kiln-new", create, ErrNotFound},
			{"inner/updir/outside/new", create, ErrNotFound},
			{"inner/rel-escape", create, ErrSymlink},
			{"inner/rel-escape", WriteFlags{}, ErrSymlink},
			{"dangling", create, ErrSymlink},
			{"dangling", WriteFlags{Create: true, Exclusive: true}, ErrExists},
			{"inner", create, ErrNotFile},
			{"missing/new", create, ErrNotFound},
			{"inner/ok.txt/new", create, ErrNotDirectory},
			{"inner/ok.txt", WriteFlags{Create: true, Exclusive: true}, ErrExists},
			{"nothing-here", WriteFlags{}, ErrNotFound},
		} {
			h, err := r.OpenWrite(tc.rel, tc.fl, disk)
			if err == nil {
				h.Close()
				t.Errorf("OpenWrite(%q, %+v) opened, want %v", tc.rel, tc.fl, tc.wantErr)
				continue
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("OpenWrite(%q, %+v) = %v, want %v", tc.rel, tc.fl, err, tc.wantErr)
			}
		}
		if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != outsideSecret {
			t.Errorf("the outside secret became %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("outside holds %d entries, want only the secret", len(ents))
		}
		if fig := disk.Figures(); fig.Used != 0 || fig.Reserved != 0 {
			t.Errorf("ledger after refused opens: %+v, want nothing used or held", fig)
		}

		// Through a link inside: created where the link leads.
		h, err := r.OpenWrite("dirlink/new.txt", create, disk)
		if err != nil {
			t.Fatalf("OpenWrite(dirlink/new.txt) = %v", err)
		}
		if _, err := h.WriteAt([]byte("hello"), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readHost(t, filepath.Join(root, "inner", "new.txt")); got != "hello" {
			t.Errorf("inner/new.txt = %q, want hello", got)
		}
		fi, err := os.Stat(filepath.Join(root, "inner", "new.txt"))
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("a new file's mode: %v, %v; want 0644", fi.Mode(), err)
		}
		// Opened again with Create|Truncate: the same file, emptied.
		h, err = r.OpenWrite("inner/new.txt", create, disk)
		if err != nil {
			t.Fatalf("OpenWrite(existing, Create|Truncate) = %v", err)
		}
		if _, err := h.WriteAt([]byte("hi"), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readHost(t, filepath.Join(root, "inner", "new.txt")); got != "hi" {
			t.Errorf("inner/new.txt after a truncating open = %q, want hi", got)
		}
		if fig := disk.Figures(); fig.Used != quota.BlockSize || fig.Reserved != 0 {
			t.Errorf("ledger after one small file: %+v, want %d used, nothing held", fig, quota.BlockSize)
		}

		// A FIFO and a hard link planted by the game server.
		if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := r.OpenWrite("fifo", create, disk); !errors.Is(err, ErrNotFile) {
			t.Errorf("OpenWrite(fifo) = %v, want ErrNotFile", err)
		}
		if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(root, "hard")); err == nil {
			if _, err := r.OpenWrite("hard", create, disk); !errors.Is(err, ErrHardLink) {
				t.Errorf("OpenWrite(hard link) = %v, want ErrHardLink", err)
			}
			if got := readHost(t, filepath.Join(outside, "secret")); got != outsideSecret {
				t.Errorf("the outside secret became %q through a hard link", got)
			}
		}
		// Mkdir, chmod, chtimes, truncate and stat through a link out.
		res := budget(1 << 20)
		if err := r.MkdirOne("up/outside/made", 0o755, res); !errors.Is(err, ErrNotFound) {
			t.Errorf("MkdirOne(up/outside/made) = %v, want ErrNotFound", err)
		}
		if err := r.Chmod("up/outside/secret", 0o666); !errors.Is(err, ErrNotFound) {
			t.Errorf("Chmod(up/outside/secret) = %v, want ErrNotFound", err)
		}
		if err := r.Truncate("up/outside/secret", 0, res); !errors.Is(err, ErrNotFound) {
			t.Errorf("Truncate(up/outside/secret) = %v, want ErrNotFound", err)
		}
		if err := r.Truncate("inner/rel-escape", 0, res); !errors.Is(err, ErrSymlink) {
			t.Errorf("Truncate(link out) = %v, want ErrSymlink", err)
		}
		if _, err := r.StatFollow("inner/rel-escape"); !errors.Is(err, ErrNotFound) {
			t.Errorf("StatFollow(link out) = %v, want ErrNotFound", err)
		}
		if e, err := r.StatFollow("dirlink"); err != nil || !e.IsDir() {
			t.Errorf("StatFollow(dirlink) = %+v, %v; want the directory it leads to", e, err)
		}
		if _, _, err := r.OpenRead("inner/rel-escape"); !errors.Is(err, ErrNotFound) {
			t.Errorf("OpenRead(link out) = %v, want ErrNotFound", err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("outside holds %d entries, want only the secret", len(ents))
		}
		if fi, _ := os.Stat(filepath.Join(outside, "secret")); fi.Mode().Perm() != 0o644 || fi.Size() != int64(len(outsideSecret)) {
			t.Errorf("the outside secret changed: mode %o, size %d", fi.Mode().Perm(), fi.Size())
		}
	})
}

// TestOpenWriteAtTheLimit: with no block left, a new file is ErrQuota
// (nothing created), while an existing one can still be opened and
// truncated (which frees blocks).
func TestOpenWriteAtTheLimit(t *testing.T) {
	resolvers(t, func(t *testing.T, r *Root, root, _ string) {
		disk := quota.NewAccount(2*quota.BlockSize, quota.TempNames{})
		disk.Adjust(2 * quota.BlockSize) // the root is full
		create := WriteFlags{Create: true, Truncate: true}
		if _, err := r.OpenWrite("inner/new.txt", create, disk); !errors.Is(err, ErrQuota) {
			t.Errorf("OpenWrite(new file at the limit) = %v, want ErrQuota", err)
		}
		if _, err := os.Lstat(filepath.Join(root, "inner", "new.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused create left a file: %v", err)
		}
		if _, err := r.OpenWrite("inner/ok.txt", WriteFlags{Create: true, Exclusive: true}, disk); !errors.Is(err, ErrExists) {
			t.Errorf("OpenWrite(existing, Exclusive, at the limit) = %v, want ErrExists", err)
		}
		h, err := r.OpenWrite("inner/ok.txt", create, disk)
		if err != nil {
			t.Fatalf("OpenWrite(existing, Create|Truncate, at the limit) = %v", err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readHost(t, filepath.Join(root, "inner", "ok.txt")); got != "" {
			t.Errorf("inner/ok.txt after a truncating open = %q, want empty", got)
		}
		if fig := disk.Figures(); fig.Used != 2*quota.BlockSize || fig.Reserved != 0 {
			t.Errorf("ledger: %+v, want unchanged (a 6-byte file and an empty one cost a block each)", fig)
		}
	})
}

// TestSymlinkSwappedMidPath: while a directory on the way is swapped back
// and forth with a symlink leading out of the root, creating, reading,
// stat'ing and making directories through that path never reach outside
// (the race the one-call resolution must not open).
func TestSymlinkSwappedMidPath(t *testing.T) {
	resolvers(t, func(t *testing.T, r *Root, root, outside string) {
		sw := filepath.Join(root, "sw")
		write(t, root, "sw/secret", "inside")
		real := filepath.Join(root, "sw-real")
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// sw: a real directory, then a link to outside, then back.
				_ = os.Rename(sw, real)
				_ = os.Symlink(outside, sw)
				_ = os.Remove(sw)
				_ = os.Rename(real, sw)
			}
		})
		disk := quota.NewAccount(1<<30, quota.TempNames{})
		res := budget(1 << 30)
		for i := range 2000 {
			if h, err := r.OpenWrite("sw/new", WriteFlags{Create: true}, disk); err == nil {
				h.Close()
			}
			if f, _, err := r.OpenRead("sw/secret"); err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				if string(b) == outsideSecret {
					t.Errorf("round %d: OpenRead(sw/secret) read the secret outside the root", i)
				}
			}
			if e, err := r.StatFollow("sw/secret"); err == nil && e.Size == int64(len(outsideSecret)) {
				t.Errorf("round %d: StatFollow(sw/secret) described the secret outside the root", i)
			}
			_ = r.MkdirOne("sw/made", 0o755, res)
			_ = r.Chmod("sw/secret", 0o600)
		}
		close(stop)
		wg.Wait()
		ents, _ := os.ReadDir(outside)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if strings.Join(names, ",") != "secret" {
			t.Errorf("outside holds %v, want only the secret", names)
		}
		if fi, _ := os.Stat(filepath.Join(outside, "secret")); fi.Mode().Perm() != 0o644 {
			t.Errorf("the outside secret's mode became %o", fi.Mode().Perm())
		}
	})
}

// TestProbeBeneath: a descriptor that is not a directory is not taken
// for a root openat2 can resolve beneath.
func TestProbeBeneath(t *testing.T) {
	r, _ := newRoot(t)
	if !r.beneath {
		t.Log("openat2 is not available here: the os.Root walk is used")
	}
	f, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if probeBeneath(int(f.Fd())) {
		t.Errorf("probeBeneath(a regular file) = true, want false")
	}
}

// TestRootCloseTwice: a second Close leaves other descriptors alone (the
// root's number may have been reused), and a closed root opens nothing.
func TestRootCloseTwice(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.txt", "a")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "a.txt")) // may take the root's old number
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r.Close()
	if _, err := f.Stat(); err != nil {
		t.Errorf("a file opened after the first Close was closed by the second: %v", err)
	}
	if _, _, err := r.OpenRead("a.txt"); err == nil {
		t.Errorf("OpenRead on a closed root succeeded")
	}
}
