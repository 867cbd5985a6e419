package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// JavaDirs are where DiscoverJava looks for Java installations: each
// directory in them holding bin/java and a release file is one (Debian,
// Ubuntu, Fedora and the Adoptium packages all install there).
var JavaDirs = []string{"/usr/lib/jvm", "/usr/lib64/jvm"}

// Javas are the Java installations of this host by major version, for the
// process runtime: the servers and the Forge/NeoForge installers run the
// java of the major their game version needs. A nil *Javas knows none.
type Javas struct {
	homes map[int]string // major → JAVA_HOME
}

// ErrNoJava: no Java of the needed major (nor an acceptable newer one) on
// this host.
var ErrNoJava = errors.New("no suitable Java on this host")

// NewJavas returns the set of explicit homes (major → JAVA_HOME, from
// --java-home) plus what DiscoverJava finds in dirs (and, with path, the
// installation the java on PATH belongs to); an explicit home wins over
// a discovered one of the same major. It checks every explicit home:
// bin/java must exist, and its release file, if any, must name that
// major.
func NewJavas(explicit map[int]string, dirs []string, path bool) (*Javas, error) {
	j := &Javas{homes: DiscoverJava(dirs, path)}
	for _, major := range slices.Sorted(maps.Keys(explicit)) {
		home := explicit[major]
		if !isExecutable(filepath.Join(home, "bin", "java")) {
			return nil, fmt.Errorf("java home %d=%s: no executable bin/java there", major, home)
		}
		if got, ok := releaseMajor(home); ok && got != major {
			return nil, fmt.Errorf("java home %d=%s: its release file says Java %d", major, home, got)
		}
		j.homes[major] = home
	}
	return j, nil
}

// DiscoverJava finds the Java installations under dirs (each
// subdirectory with an executable bin/java and a release file naming
// JAVA_VERSION) and, with path, the one the java on PATH belongs to; the
// first found of each major wins, symlinked duplicates counted once.
func DiscoverJava(dirs []string, path bool) map[int]string {
	out := map[int]string{}
	seen := map[string]bool{}
	add := func(home string) {
		real, err := filepath.EvalSymlinks(home)
		if err != nil || seen[real] {
			return
		}
		seen[real] = true
		if !isExecutable(filepath.Join(real, "bin", "java")) {
			return
		}
		if major, ok := releaseMajor(real); ok {
			if _, dup := out[major]; !dup {
				out[major] = real
			}
		}
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			add(filepath.Join(d, e.Name()))
		}
	}
	if p, err := exec.LookPath("java"); err == nil && path {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			add(filepath.Dir(filepath.Dir(real)))
		}
	}
	return out
}

// Majors lists the majors known, ascending.
func (j *Javas) Majors() []int {
	if j == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(j.homes))
}

// Home returns the JAVA_HOME chosen for a program that needs Java major:
// that major; else, for 16 and newer, the lowest newer one (16 → 17,
// 17 → 21, 21 → 25: Minecraft from 1.17 on runs on newer Java); never a
// newer one for 8 (Minecraft up to 1.16.5, and above all the Forge of
// those versions, break on Java 9+, since they cast the application class
// loader to URLClassLoader). The error names the major and how to
// provide it; it wraps ErrNoJava.
func (j *Javas) Home(major int) (string, error) {
	if j == nil {
		j = &Javas{}
	}
	if h, ok := j.homes[major]; ok {
		return h, nil
	}
	if major >= 16 {
		for _, m := range j.Majors() {
			if m > major {
				return j.homes[m], nil
			}
		}
	}
	have := "none"
	if ms := j.Majors(); len(ms) > 0 {
		var s []string
		for _, m := range ms {
			s = append(s, strconv.Itoa(m))
		}
		have = strings.Join(s, ", ")
	}
	newer := " or newer"
	if major < 16 {
		newer = " (a newer one is not used: Minecraft 1.16.5 and older, and their Forge, need Java 8)"
	}
	return "", fmt.Errorf("this needs Java %d%s, and the host has %s (found under %s and on PATH): install it or pass --java-home %d=<its JAVA_HOME>: %w",
		major, newer, have, strings.Join(JavaDirs, ", "), major, ErrNoJava)
}

// Binary is Home's bin/java.
func (j *Javas) Binary(major int) (string, error) {
	h, err := j.Home(major)
	if err != nil {
		return "", err
	}
	return filepath.Join(h, "bin", "java"), nil
}

// releaseMajor reads JAVA_VERSION from home/release: "17.0.15" → 17,
// "1.8.0_392" → 8.
func releaseMajor(home string) (int, bool) {
	f, err := os.Open(filepath.Join(home, "release"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "JAVA_VERSION=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"`)
		v = strings.TrimPrefix(v, "1.")
		end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
		if end < 0 {
			end = len(v)
		}
		n, err := strconv.Atoi(v[:end])
		return n, err == nil && n > 0
	}
	return 0, false
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
