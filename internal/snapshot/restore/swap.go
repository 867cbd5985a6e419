package restore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
)

// The swap (doc.go, "Restore"). Once the tree is staged, plan compares it
// with the root and writes the journal: one line per step, each step one
// rename (or a mode and mtime), each one that can be done again without
// harm, so that a restore cut anywhere after the journal is finished by
// running the journal again from its start:
//
//	kiln-restore-journal 3
//	put <inode> <path>               the staged entry (that inode) replaces path
//	del <path>                       path goes to the trash
//	attr <mode> <mtime> <path>       a directory kept in place gets its mode and mtime
//	keep <inode> <mode> <mtime> <path>  a file kept in place (that inode) gets its mode and mtime
//	end <steps>
//	mac <hex>
//
// Paths are quoted (strconv.Quote: a name in the tree may hold any byte
// but "/" and NUL) and must be clean and relative (files.Clean leaves them
// as they are: no "..", no empty or "." segment, no name of Kiln's). Steps
// come parents' content first, a directory's attr after everything in it.
// The last line is an HMAC-SHA256 of every byte before it, under the
// root's temporary-name key and bound to the restore directory's name
// (quota.TempNames.MAC): a journal is run only when it verifies, so one a
// user or a game server wrote (the root is theirs) is never run. Journals
// of versions 1 and 2 (before the MAC) are not run either: a restore an
// older Kiln left mid-swap is left as it is, with a log line.
const (
	journalHeader = "kiln-restore-journal 3"
	journalMACUse = "restore journal" // quota.TempNames.MAC's purpose
)

// swapPlan is what plan found.
type swapPlan struct {
	removedCost int64 // what the replaced and removed entries cost
	replaced    int
	steps       int
	kept        int   // files left in place
	keptBytes   int64 // their content
}

// planner writes the journal's steps.
type planner struct {
	ctx    context.Context
	ignore engine.IgnoreFunc
	dev    uint64 // the staging directory's file system
	w      *bufio.Writer
	keep   *keepReader // the files kept in place, in the order merge meets them
	p      swapPlan
}

// plan writes the journal (journalTemp) of the swap of the staged tree
// into the root. It moves nothing.
func (s *staging) plan(ctx context.Context, rootFD int, ignore engine.IgnoreFunc, names quota.TempNames) (swapPlan, error) {
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return swapPlan{}, fmt.Errorf("plan the swap: %w", err)
	}
	fd, err := unix.Openat(s.fd, journalTemp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return swapPlan{}, fmt.Errorf("plan the swap: %w", err)
	}
	f := os.NewFile(uintptr(fd), journalTemp)
	defer f.Close()
	keep, err := openKeepList(s.fd)
	if err != nil {
		return swapPlan{}, fmt.Errorf("plan the swap: %w", err)
	}
	defer keep.close()
	mac := names.MAC(journalMACUse, s.name)
	pl := &planner{ctx: ctx, ignore: ignore, dev: st.Dev, w: bufio.NewWriterSize(io.MultiWriter(f, mac), 64<<10), keep: keep}
	fmt.Fprintln(pl.w, journalHeader)
	if err := pl.merge(s.tree, rootFD, "."); err != nil {
		return swapPlan{}, fmt.Errorf("plan the swap: %w", err)
	}
	if err := keep.done(); err != nil {
		return swapPlan{}, fmt.Errorf("plan the swap: %w", err)
	}
	fmt.Fprintf(pl.w, "end %d\n", pl.p.steps)
	if err := pl.w.Flush(); err != nil {
		return swapPlan{}, fmt.Errorf("write the journal: %w", err)
	}
	if _, err := fmt.Fprintf(f, "mac %x\n", mac.Sum(nil)); err != nil {
		return swapPlan{}, fmt.Errorf("write the journal: %w", err)
	}
	if err := f.Sync(); err != nil {
		return swapPlan{}, fmt.Errorf("write the journal: %w", err)
	}
	return pl.p, nil
}

// commitJournal makes the journal the restore's: once it is in place
// (renamed, and the rename synced), Recover finishes the swap.
func (s *staging) commitJournal() error {
	if err := unix.Renameat(s.fd, journalTemp, s.fd, journalName); err != nil {
		return fmt.Errorf("commit the journal: %w", err)
	}
	if err := unix.Fsync(s.fd); err != nil {
		return fmt.Errorf("commit the journal: %w", err)
	}
	return nil
}

func (pl *planner) step(format string, args ...any) {
	fmt.Fprintf(pl.w, format, args...)
	pl.p.steps++
}

// names lists directory fd, sorted, leaving out Kiln's temporary entries
// (another operation's, or this restore's own directory).
func names(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", dirFlags, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	list, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	list = slices.DeleteFunc(list, func(n string) bool { return strings.HasPrefix(n, quota.TempPrefix) })
	slices.Sort(list)
	return list, nil
}

// lstat describes name in dirfd; ok is false when it does not exist.
func lstat(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return st, true, nil
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// sameDevice refuses an entry of the tree on another file system (a
// mount point inside the root): it cannot be renamed into the trash, and
// removing the trash must never descend into it.
func (pl *planner) sameDevice(rel string, st *unix.Stat_t) error {
	if st.Dev != pl.dev {
		return fmt.Errorf("%s is on another file system (a mount point inside the root): restore refused", files.Display(rel))
	}
	return nil
}

// merge plans the swap of staged directory newFD into the root's
// directory curFD, both named rel.
func (pl *planner) merge(newFD, curFD int, rel string) error {
	if err := pl.ctx.Err(); err != nil {
		return err
	}
	newNames, err := names(newFD)
	if err != nil {
		return fmt.Errorf("list the staged %s: %w", files.Display(rel), err)
	}
	curNames, err := names(curFD)
	if err != nil {
		return fmt.Errorf("list %s: %w", files.Display(rel), err)
	}
	i, j := 0, 0
	for i < len(newNames) || j < len(curNames) {
		var name string
		inNew, inCur := false, false
		switch {
		case j >= len(curNames) || i < len(newNames) && newNames[i] < curNames[j]:
			name, inNew = newNames[i], true
			i++
		case i >= len(newNames) || curNames[j] < newNames[i]:
			name, inCur = curNames[j], true
			j++
		default:
			name, inNew, inCur = newNames[i], true, true
			i++
			j++
		}
		child := join(rel, name)
		if !inNew {
			if k := pl.keep.next(child); k != nil {
				if err := pl.kept(curFD, name, k); err != nil {
					return err
				}
				continue
			}
			if err := pl.removal(curFD, name, child); err != nil {
				return err
			}
			continue
		}
		nst, ok, err := lstat(newFD, name)
		if err != nil || !ok {
			return fmt.Errorf("the staged %s: %w", files.Display(child), errors.Join(err, errors.New("gone")))
		}
		if !inCur {
			pl.step("put %d %s\n", nst.Ino, strconv.Quote(child))
			continue
		}
		cst, ok, err := lstat(curFD, name)
		if err != nil {
			return err
		}
		if !ok { // gone meanwhile
			pl.step("put %d %s\n", nst.Ino, strconv.Quote(child))
			continue
		}
		if err := pl.sameDevice(child, &cst); err != nil {
			return err
		}
		if isDir(&nst) && isDir(&cst) {
			if err := pl.mergeDirs(newFD, curFD, name, child); err != nil {
				return err
			}
			// The staged directory itself is not swapped in: it goes with
			// the staging directory (it was reserved as it was made).
			pl.p.removedCost += quota.EntryCost
			pl.step("attr %o %d %s\n", nst.Mode&0o777, unix.TimespecToNsec(nst.Mtim), strconv.Quote(child))
			continue
		}
		cost, _, err := pl.measure(curFD, name, child, &cst, false)
		if err != nil {
			return err
		}
		pl.p.removedCost += cost
		pl.p.replaced++
		pl.step("put %d %s\n", nst.Ino, strconv.Quote(child))
	}
	return nil
}

// kept plans a file the builder proved equal to its entry (k): it stays,
// and gets the snapshot's mode and mtime where they differ. It must still
// be the file that was read (same inode, size, mtime and ctime): one
// written since is refused, before the commit point.
func (pl *planner) kept(curFD int, name string, k *kept) error {
	st, ok, err := lstat(curFD, name)
	if err != nil {
		return err
	}
	if !ok || !k.sameStat(&st) {
		return fmt.Errorf("%s changed while the restore checked it: try again", files.Display(k.path))
	}
	if err := pl.sameDevice(k.path, &st); err != nil {
		return err
	}
	pl.p.kept++
	pl.p.keptBytes += k.size
	if st.Mode&0o7777 != k.mode || unix.TimespecToNsec(st.Mtim) != k.wantMtime {
		pl.step("keep %d %o %d %s\n", k.ino, k.mode, k.wantMtime, strconv.Quote(k.path))
	}
	return nil
}

// mergeDirs opens directory name on both sides and merges them.
func (pl *planner) mergeDirs(newFD, curFD int, name, rel string) error {
	nfd, err := openDirAt(newFD, name)
	if err != nil {
		return fmt.Errorf("the staged %s: %w", files.Display(rel), err)
	}
	defer unix.Close(nfd)
	cfd, err := openDirAt(curFD, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", files.Display(rel), err)
	}
	defer unix.Close(cfd)
	return pl.merge(nfd, cfd, rel)
}

// removal plans what becomes of entry name of the root's directory curFD
// (rel) that the snapshot does not hold: left as it is when ignored,
// removed whole when nothing in it is ignored, else emptied of what is not.
func (pl *planner) removal(curFD int, name, rel string) error {
	st, ok, err := lstat(curFD, name)
	if err != nil || !ok {
		return err // gone meanwhile: nothing to do
	}
	if pl.ignore != nil && pl.ignore(rel, isDir(&st)) {
		return nil
	}
	if err := pl.sameDevice(rel, &st); err != nil {
		return err
	}
	cost, keeps, err := pl.measure(curFD, name, rel, &st, true)
	if err != nil {
		return err
	}
	if !keeps {
		pl.p.removedCost += cost
		pl.p.replaced++
		pl.step("del %s\n", strconv.Quote(rel))
		return nil
	}
	fd, err := openDirAt(curFD, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", files.Display(rel), err)
	}
	defer unix.Close(fd)
	list, err := names(fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", files.Display(rel), err)
	}
	for _, n := range list {
		if err := pl.removal(fd, n, join(rel, n)); err != nil {
			return err
		}
	}
	return nil
}

// measure adds up what entry name of dirFD (rel, described by st) costs
// against the disk limit, everything in it included, and, with
// withIgnore, whether anything in it is ignored (and so must stay). It
// refuses a tree that holds another file system.
func (pl *planner) measure(dirFD int, name, rel string, st *unix.Stat_t, withIgnore bool) (cost int64, keeps bool, err error) {
	if err := pl.sameDevice(rel, st); err != nil {
		return 0, false, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return quota.Cost(st.Size), false, nil
	case unix.S_IFDIR:
	default:
		return quota.EntryCost, false, nil
	}
	fd, err := openDirAt(dirFD, name)
	if err != nil {
		return 0, false, fmt.Errorf("open %s: %w", files.Display(rel), err)
	}
	defer unix.Close(fd)
	list, err := names(fd)
	if err != nil {
		return 0, false, fmt.Errorf("list %s: %w", files.Display(rel), err)
	}
	cost = quota.EntryCost
	for _, n := range list {
		cst, ok, err := lstat(fd, n)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			continue
		}
		child := join(rel, n)
		if withIgnore && pl.ignore != nil && pl.ignore(child, isDir(&cst)) {
			keeps = true
			continue
		}
		c, k, err := pl.measure(fd, n, child, &cst, withIgnore)
		if err != nil {
			return 0, false, err
		}
		cost += c
		keeps = keeps || k
	}
	return cost, keeps, nil
}

// join joins a root-relative directory and a name.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// finish runs the journal of the restore directory name (fd) from its
// start, then removes the directory: the end of Restore, and Recover.
// Tests stop it after steps steps (errStopped); -1 runs them all.
func finish(rootFD int, name string, fd int, names quota.TempNames, steps int) error {
	if err := runJournal(rootFD, fd, name, names, steps); err != nil {
		return err
	}
	// The renames are durable before the journal goes: a crash after this
	// point must not find the journal gone and the moves lost.
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("sync the swap: %w", err)
	}
	if err := unix.Unlinkat(fd, journalName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove the journal: %w", err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("remove the journal: %w", err)
	}
	if err := quota.RemoveAllAt(rootFD, name); err != nil {
		return fmt.Errorf("remove the staging directory: %w", err)
	}
	return nil
}

// dirPair caches the directories of the last step: steps come in tree
// order, so consecutive ones share them.
type dirPair struct {
	rel       string
	cur, tree int // -1: not open (tree: not there)
}

func (d *dirPair) close() {
	if d.cur >= 0 {
		unix.Close(d.cur)
	}
	if d.tree >= 0 {
		unix.Close(d.tree)
	}
	d.cur, d.tree, d.rel = -1, -1, ""
}

// openPath opens directory rel below top one name at a time, never
// through a symlink.
func openPath(top int, rel string) (int, error) {
	fd, err := unix.Dup(top)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for seg := range strings.SplitSeq(rel, "/") {
		next, err := openDirAt(fd, seg)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// errStopped: a test stopped the swap here, as a crash would.
var errStopped = errors.New("swap stopped")

// ErrUntrusted: a restore journal that does not verify under the root's
// key (quota.TempNames.MAC): written by someone else than Kiln, changed,
// cut, or an older Kiln's (no MAC). It is never run; it stays where it is.
var ErrUntrusted = errors.New("the restore journal is not Kiln's (its MAC does not verify): left as it is")

// maxJournalLine bounds a journal line: a quoted path of MaxPathLen bytes
// (each byte at most 4 when quoted) and a step's numbers.
const maxJournalLine = 4*files.MaxPathLen + 256

// verifyJournal reads the journal jf through to its MAC line and checks
// it against the MAC of restore directory name under names.
func verifyJournal(jf *os.File, name string, names quota.TempNames) error {
	mac := names.MAC(journalMACUse, name)
	br := bufio.NewReaderSize(jf, 64<<10)
	first := true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxJournalLine {
				return fmt.Errorf("%w: a line is too long", ErrUntrusted)
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: no MAC", ErrUntrusted)
			}
			return fmt.Errorf("read the journal: %w", err)
		}
		if first && string(line) != journalHeader+"\n" {
			return fmt.Errorf("%w: header %.40q", ErrUntrusted, line)
		}
		first = false
		if rest, ok := bytes.CutPrefix(line, []byte("mac ")); ok {
			want := hex.EncodeToString(mac.Sum(nil)) + "\n"
			if !hmac.Equal(rest, []byte(want)) {
				return ErrUntrusted
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: bytes after the MAC", ErrUntrusted)
			}
			return nil
		}
		mac.Write(line)
	}
}

// runJournal carries out the steps of the journal in restore directory
// name (fd), once it verified (ErrUntrusted): all of them, or the first
// limit (then errStopped).
func runJournal(rootFD, fd int, name string, names quota.TempNames, limit int) error {
	jfd, err := unix.Openat(fd, journalName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the journal: %w", err)
	}
	jf := os.NewFile(uintptr(jfd), journalName)
	defer jf.Close()
	if err := verifyJournal(jf, name, names); err != nil {
		return err
	}
	if _, err := jf.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read the journal: %w", err)
	}
	treeFD, err := openDirAt(fd, stageTree)
	if err != nil {
		return fmt.Errorf("open the staged tree: %w", err)
	}
	defer unix.Close(treeFD)
	trashFD, err := openDirAt(fd, stageTrash)
	if err != nil {
		return fmt.Errorf("open the trash: %w", err)
	}
	defer unix.Close(trashFD)

	sc := bufio.NewScanner(jf)
	sc.Buffer(make([]byte, 64<<10), maxJournalLine+1)
	if !sc.Scan() || sc.Text() != journalHeader {
		return errors.New("the journal has no header")
	}
	dirs := dirPair{cur: -1, tree: -1}
	defer dirs.close()
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		op, rest, _ := strings.Cut(line, " ")
		if op == "end" {
			if rest != strconv.Itoa(n-1) {
				return fmt.Errorf("the journal ends after %d steps, its end says %s", n-1, rest)
			}
			return nil
		}
		if n-1 == limit {
			return errStopped
		}
		var err error
		switch op {
		case "put":
			err = stepPut(rootFD, treeFD, trashFD, &dirs, n, rest)
		case "del":
			err = stepDel(rootFD, treeFD, trashFD, &dirs, n, rest)
		case "attr":
			err = stepAttr(rootFD, treeFD, &dirs, rest)
		case "keep":
			err = stepKeep(rootFD, treeFD, &dirs, rest)
		default:
			err = errors.New("unknown step")
		}
		if err != nil {
			return fmt.Errorf("journal step %d (%.200s): %w", n, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the journal: %w", err)
	}
	return errors.New("the journal has no end")
}

// parent opens (or reuses) the directory of rel in the root and in the
// staged tree (which may not hold it: tree is then -1).
func (d *dirPair) parent(rootFD, treeFD int, rel string) error {
	dir := path.Dir(rel)
	if d.rel == dir && d.cur >= 0 {
		return nil
	}
	d.close()
	cur, err := openPath(rootFD, dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", files.Display(dir), err)
	}
	tree, err := openPath(treeFD, dir)
	if err != nil {
		tree = -1
	}
	d.rel, d.cur, d.tree = dir, cur, tree
	return nil
}

// unquote reads the quoted path ending a step: a clean relative path
// naming something below the root, which files.Clean leaves as it is (no
// "..", no empty or "." segment, no leading "/", no name of Kiln's). The
// MAC already vouches for the journal; this holds even if it did not.
func unquote(s string) (string, error) {
	p, err := strconv.Unquote(s)
	if err != nil || p == "" || p == "." {
		return "", fmt.Errorf("bad path %.200q", s)
	}
	if c, err := files.Clean("path", p); err != nil || c != p {
		return "", fmt.Errorf("bad path %.200q: not a clean relative path", s)
	}
	return p, nil
}

// stepPut makes the staged entry of inode ino the root's entry rel. Done
// already (rel is that inode): nothing. Otherwise what is at rel goes: a
// file or link is replaced by one rename; anything else is exchanged with
// the staged entry (renameat2 RENAME_EXCHANGE: no moment without either),
// or, where the file system cannot exchange, moved to the trash first.
func stepPut(rootFD, treeFD, trashFD int, d *dirPair, n int, rest string) error {
	inoStr, q, ok := strings.Cut(rest, " ")
	ino, err := strconv.ParseUint(inoStr, 10, 64)
	if !ok || err != nil {
		return errors.New("bad inode")
	}
	rel, err := unquote(q)
	if err != nil {
		return err
	}
	if err := d.parent(rootFD, treeFD, rel); err != nil {
		return err
	}
	name := path.Base(rel)
	cst, exists, err := lstat(d.cur, name)
	if err != nil {
		return err
	}
	if exists && cst.Ino == ino {
		return nil // done before
	}
	if d.tree < 0 {
		return errors.New("the staged entry is gone")
	}
	nst, staged, err := lstat(d.tree, name)
	if err != nil {
		return err
	}
	if !staged || nst.Ino != ino {
		return errors.New("the staged entry is gone")
	}
	if !exists {
		return renameNoReplace(d.tree, name, d.cur, name)
	}
	if !isDir(&cst) && !isDir(&nst) {
		return unix.Renameat(d.tree, name, d.cur, name)
	}
	err = unix.Renameat2(d.tree, name, d.cur, name, unix.RENAME_EXCHANGE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	if err := renameNoReplace(d.cur, name, trashFD, strconv.Itoa(n)); err != nil {
		return err
	}
	return renameNoReplace(d.tree, name, d.cur, name)
}

// stepDel moves rel to the trash (which the end of the swap removes);
// gone already: nothing.
func stepDel(rootFD, treeFD, trashFD int, d *dirPair, n int, q string) error {
	rel, err := unquote(q)
	if err != nil {
		return err
	}
	if err := d.parent(rootFD, treeFD, rel); err != nil {
		return err
	}
	name := path.Base(rel)
	if _, exists, err := lstat(d.cur, name); err != nil || !exists {
		return err
	}
	return renameNoReplace(d.cur, name, trashFD, strconv.Itoa(n))
}

// stepAttr gives directory rel, kept in place, the snapshot's mode (and
// its owner's rwx) and mtime.
func stepAttr(rootFD, treeFD int, d *dirPair, rest string) error {
	f := strings.SplitN(rest, " ", 3)
	if len(f) != 3 {
		return errors.New("bad attr step")
	}
	mode, err1 := strconv.ParseUint(f[0], 8, 32)
	mtime, err2 := strconv.ParseInt(f[1], 10, 64)
	rel, err3 := unquote(f[2])
	if err := errors.Join(err1, err2, err3); err != nil || mode&^0o777 != 0 {
		return errors.New("bad attr step")
	}
	if err := d.parent(rootFD, treeFD, rel); err != nil {
		return err
	}
	name := path.Base(rel)
	fd, err := openDirAt(d.cur, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, uint32(mode|0o700)); err != nil {
		return err
	}
	return unix.UtimesNanoAt(d.cur, name, timespec(mtime), unix.AT_SYMLINK_NOFOLLOW)
}

// stepKeep gives file rel, kept in place, the snapshot's mode and mtime
// if it is still the file of inode ino; anything else there is left (it
// replaced the file after the swap began, as a write after the restore
// would have).
func stepKeep(rootFD, treeFD int, d *dirPair, rest string) error {
	f := strings.SplitN(rest, " ", 4)
	if len(f) != 4 {
		return errors.New("bad keep step")
	}
	ino, err0 := strconv.ParseUint(f[0], 10, 64)
	mode, err1 := strconv.ParseUint(f[1], 8, 32)
	mtime, err2 := strconv.ParseInt(f[2], 10, 64)
	rel, err3 := unquote(f[3])
	if err := errors.Join(err0, err1, err2, err3); err != nil || mode&^0o777 != 0 {
		return errors.New("bad keep step")
	}
	if err := d.parent(rootFD, treeFD, rel); err != nil {
		return err
	}
	// O_PATH: a file of mode 0 can be opened so by its owner, and chmod
	// and utimensat reach it through /proc/self/fd.
	fd, err := unix.Openat(d.cur, path.Base(rel), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != ino {
		return nil
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Fchmodat(unix.AT_FDCWD, proc, uint32(mode), 0); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, proc, timespec(mtime), 0)
}

// renameNoReplace renames without replacing anything (renameat2
// RENAME_NOREPLACE; a check then a rename where the file system lacks it).
func renameNoReplace(fromFD int, from string, toFD int, to string) error {
	err := unix.Renameat2(fromFD, from, toFD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		if _, exists, serr := lstat(toFD, to); serr != nil || exists {
			return errors.Join(serr, unix.EEXIST)
		}
		err = unix.Renameat(fromFD, from, toFD, to)
	}
	return err
}

// journaled reports whether the root (dir) holds a restore directory of
// Kiln's (names.Ours) with a journal: a swap Recover has to finish.
func journaled(dir *os.File, names quota.TempNames) (bool, error) {
	fd, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	list, err := f.Readdirnames(-1)
	if err != nil {
		return false, fmt.Errorf("list the root: %w", err)
	}
	for _, name := range list {
		if !strings.HasPrefix(name, restorePrefix) || !names.Ours(name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), name+"/"+journalName, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// Recovered is what Recover found.
type Recovered struct {
	Finished  int // restores cut during their swap, finished now
	Discarded int // restores cut before their commit point (or after their swap), removed
	// Foreign lists (up to 16) names that look like a restore directory
	// but that Kiln did not make (names.Ours): a user's or a game
	// server's. They are left as they are: neither run nor removed.
	Foreign []string
	// Untrusted lists (up to 16) restore directories of Kiln's whose
	// journal does not verify (ErrUntrusted): left as they are.
	Untrusted []string
}

// maxListed bounds Recovered's lists.
const maxListed = 16

// Recover finishes or discards the restores a crash cut short in root:
// one with a journal is finished (its swap run again from the start: every
// step is done at most once), one without is removed (it had not swapped
// anything in, or it had swapped everything and was being cleaned up).
// Only restore directories Kiln made are considered (names.Ours), and a
// journal is run only if it verifies (ErrUntrusted): a root is its
// server's to write, so anything else there may be a forgery. It must run
// before anything else touches the root after a start: before the server
// runs and before the disk ledger's first walk, which would remove the
// restore's directory as a crash's leftover and lose the half of the swap
// not yet done. Never while a Restore runs.
func Recover(ctx context.Context, root *files.Root, names quota.TempNames) (Recovered, error) {
	var out Recovered
	dir, err := root.OpenDir(".")
	if err != nil {
		return out, fmt.Errorf("recover restores: %w", err)
	}
	defer dir.Close()
	rootFD := int(dir.Fd())
	list, err := dir.Readdirnames(-1)
	if err != nil {
		return out, fmt.Errorf("recover restores: %w", err)
	}
	slices.Sort(list)
	for _, name := range list {
		if !strings.HasPrefix(name, restorePrefix) {
			continue
		}
		if !names.Ours(name) {
			if len(out.Foreign) < maxListed {
				out.Foreign = append(out.Foreign, name)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		fd, err := openDirAt(rootFD, name)
		if err != nil {
			return out, fmt.Errorf("recover %s: %w", name, err)
		}
		_, journal, err := lstat(fd, journalName)
		if err == nil && journal {
			err = finish(rootFD, name, fd, names, -1)
			if err == nil {
				out.Finished++
			} else if errors.Is(err, ErrUntrusted) {
				if len(out.Untrusted) < maxListed {
					out.Untrusted = append(out.Untrusted, name)
				}
				err = nil
			}
		} else if err == nil {
			err = quota.RemoveAllAt(rootFD, name)
			if err == nil {
				out.Discarded++
			}
		}
		unix.Close(fd)
		if err != nil {
			return out, fmt.Errorf("recover %s: %w", name, err)
		}
	}
	return out, nil
}
