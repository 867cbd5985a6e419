package restore

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
)

// forgedJournal is what a team can write into its own root (through a
// game server, or through the files API and SFTP before Kiln's names were
// refused there): steps that climb out of the root.
const forgedSteps = `del "../outside/secret.txt"
del "../other/world/level.dat"
attr 777 0 "../outside"
end 3
`

// plantRestoreDir makes a restore directory named name in root with the
// journal journal, as an attacker would.
func plantRestoreDir(t *testing.T, root, name, journal string) {
	t.Helper()
	for _, d := range []string{stageTree, stageTrash} {
		if err := os.MkdirAll(filepath.Join(root, name, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, name, journalName), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
}

// escapeFixture is a root beside an "outside" directory and another
// team's server root, each holding a file the forged steps go for.
func escapeFixture(t *testing.T) (root string, guarded map[string]string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	guarded = map[string]string{
		filepath.Join(base, "outside", "secret.txt"):       "host secret",
		filepath.Join(base, "other", "world", "level.dat"): "another team's world",
		filepath.Join(root, "world", "level.dat"):          "this server's world",
	}
	for p, content := range guarded {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(base, "outside"), 0o700); err != nil {
		t.Fatal(err)
	}
	return root, guarded
}

func checkGuarded(t *testing.T, guarded map[string]string) {
	t.Helper()
	for p, want := range guarded {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q untouched", p, got, err, want)
		}
		if strings.HasSuffix(p, "secret.txt") {
			if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the outside directory: %v, %v; want it 0700 still", fi.Mode(), err)
			}
		}
	}
}

// signed is journal with the MAC Kiln would write for restore directory
// name under names.
func signed(names quota.TempNames, name, steps string) string {
	body := journalHeader + "\n" + steps
	m := names.MAC(journalMACUse, name)
	m.Write([]byte(body))
	return body + fmt.Sprintf("mac %x\n", m.Sum(nil))
}

// TestRecoverLeavesForgedRestoreDirectories: a restore directory Kiln did
// not make (its name does not carry Kiln's tag) is neither run nor
// removed, whatever journal it holds, and a journal in a directory of
// Kiln's name runs only if its MAC verifies. Before, Recover replayed any
// ".kiln-tmp-restore-*" journal as Kiln's user and its ".." steps moved a
// host file and another team's world into the attacker's trash.
func TestRecoverLeavesForgedRestoreDirectories(t *testing.T) {
	names := enginetest.Names()
	cases := []struct {
		name, dir, journal string
		want               Recovered
	}{
		{"unsigned v2, a user's name", restorePrefix + "x", "kiln-restore-journal 2\n" + forgedSteps, Recovered{Foreign: []string{restorePrefix + "x"}}},
		{"signed by another key, a user's name", restorePrefix + "y", signed(quota.NewTempNames([]byte("not kiln's key, but 32 bytes ok")), restorePrefix+"y", forgedSteps), Recovered{Foreign: []string{restorePrefix + "y"}}},
		{"Kiln's name, unsigned", names.Name(restoreBody + "00"), "kiln-restore-journal 2\n" + forgedSteps, Recovered{Untrusted: []string{names.Name(restoreBody + "00")}}},
		{"Kiln's name, a MAC of another name", names.Name(restoreBody + "01"), signed(names, names.Name(restoreBody+"02"), forgedSteps), Recovered{Untrusted: []string{names.Name(restoreBody + "01")}}},
		{"Kiln's name, a forged MAC", names.Name(restoreBody + "03"), journalHeader + "\n" + forgedSteps + "mac " + strings.Repeat("ab", 32) + "\n", Recovered{Untrusted: []string{names.Name(restoreBody + "03")}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, guarded := escapeFixture(t)
			plantRestoreDir(t, root, tc.dir, tc.journal)
			got, err := Recover(t.Context(), enginetest.OpenRoot(t, root), names)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Recover = %+v, %v; want %+v", got, err, tc.want)
			}
			checkGuarded(t, guarded)
			// Left as it was: neither run nor removed.
			if j, err := os.ReadFile(filepath.Join(root, tc.dir, journalName)); err != nil || string(j) != tc.journal {
				t.Errorf("the planted journal: %q, %v; want it left", j, err)
			}
		})
	}
}

// TestRecoverRefusesPathsOutOfTheRoot: even a journal that verifies (as if
// the key had leaked) is run only on clean relative paths: a step with a
// ".." segment, an empty or "." segment or a name of Kiln's fails the
// recovery before it moves anything.
func TestRecoverRefusesPathsOutOfTheRoot(t *testing.T) {
	names := enginetest.Names()
	for i, step := range []string{
		`del "../outside/secret.txt"`,
		`del "world/../../outside/secret.txt"`,
		`attr 777 0 "../outside"`,
		`del "world//level.dat"`,
		`del "./world/level.dat"`,
		`del "world/level.dat/"`,
		`del "/world/level.dat"`,
		`del "` + quota.TempPrefix + `x/level.dat"`,
	} {
		t.Run(step, func(t *testing.T) {
			root, guarded := escapeFixture(t)
			dir := names.Name(fmt.Sprintf("%s%02d", restoreBody, i))
			plantRestoreDir(t, root, dir, signed(names, dir, step+"\nend 1\n"))
			_, err := Recover(t.Context(), enginetest.OpenRoot(t, root), names)
			if err == nil || !strings.Contains(err.Error(), "bad ") {
				t.Errorf("Recover = %v; want a bad step", err)
			}
			checkGuarded(t, guarded)
		})
	}
}
