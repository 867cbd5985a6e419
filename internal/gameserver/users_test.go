package gameserver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseUIDRange(t *testing.T) {
	for in, want := range map[string]UIDRange{
		"200000-299999": {200000, 299999},
		"5-5":           {5, 5},
		"off":           {},
	} {
		got, err := ParseUIDRange(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseUIDRange(%q) = %v (%s), %v; want %v", in, got, got, err, want)
		}
	}
	for _, bad := range []string{"", "0-10", "10-5", "1-2147483647", "x-y", "100", "-5", "1-2-3"} {
		if _, err := ParseUIDRange(bad); err == nil {
			t.Errorf("ParseUIDRange(%q) accepted", bad)
		}
	}
}

func TestCheckUIDRange(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nbroken\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nstaff:x:250000:\n"), 0o644)
	if err := CheckUIDRange(UIDRange{200000, 240000}, passwd, group); err != nil {
		t.Errorf("a free range refused: %v", err)
	}
	err := CheckUIDRange(UIDRange{900, 1000}, passwd, group)
	if err == nil || !strings.Contains(err.Error(), "user alice (id 1000") {
		t.Errorf("a range holding alice: %v", err)
	}
	err = CheckUIDRange(UIDRange{200000, 299999}, passwd, group)
	if err == nil || !strings.Contains(err.Error(), "group staff (id 250000") {
		t.Errorf("a range holding group staff: %v", err)
	}
	if err := CheckUIDRange(UIDRange{1, 10}, filepath.Join(dir, "none"), filepath.Join(dir, "none")); err != nil {
		t.Errorf("missing files: %v", err)
	}
}

// TestUsersForID: a root gets a free id of the range, keeps it across a
// restart (read back from the root's owner), two roots never share one,
// and a root whose owner is another's id gets a new one.
func TestUsersForID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP USERS SUITE: chown needs root")
	}
	dir := t.TempDir()
	mk := func(id string) string {
		p := filepath.Join(dir, id)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222", "33333333-3333-3333-3333-333333333333"
	ra, rb, rc := mk(a), mk(b), mk(c)
	rng := UIDRange{First: 210000, Last: 210002}
	u := &users{rng: rng, dir: dir}
	ua, err := u.forID(a, ra)
	if err != nil || !rng.Contains(ua.UID) || ua.GID != ua.UID {
		t.Fatalf("forID(a) = %+v, %v", ua, err)
	}
	var st syscall.Stat_t
	syscall.Stat(ra, &st)
	if st.Uid != ua.UID || st.Gid != ua.GID || st.Mode&0o7777 != 0o700 {
		t.Errorf("a's root: %d:%d %o; want %d and 0700", st.Uid, st.Gid, st.Mode&0o7777, ua.UID)
	}
	ub, err := u.forID(b, rb)
	if err != nil || ub.UID == ua.UID {
		t.Fatalf("forID(b) = %+v, %v; a has %d", ub, err, ua.UID)
	}
	// A restart: ids are read back from the roots.
	u2 := &users{rng: rng, dir: dir}
	if again, err := u2.forID(a, ra); err != nil || again != ua {
		t.Errorf("after a restart forID(a) = %+v, %v; want %+v", again, err, ua)
	}
	// c's root claims a's id (copied by hand): c gets the one left.
	os.Lchown(rc, int(ua.UID), int(ua.UID))
	uc, err := u2.forID(c, rc)
	if err != nil || uc.UID == ua.UID || uc.UID == ub.UID || !rng.Contains(uc.UID) {
		t.Errorf("forID(c) = %+v, %v; want the free id", uc, err)
	}
	// The range is full now.
	d := "44444444-4444-4444-4444-444444444444"
	if _, err := u2.forID(d, mk(d)); err == nil || !strings.Contains(err.Error(), "--uid-range") {
		t.Errorf("forID on a full range = %v", err)
	}
	u2.release(b)
	if ud, err := u2.forID(d, filepath.Join(dir, d)); err != nil || ud.UID != ub.UID {
		t.Errorf("after b's release forID(d) = %+v, %v; want b's id %d", ud, err, ub.UID)
	}
}
