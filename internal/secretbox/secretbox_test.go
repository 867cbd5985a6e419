package secretbox

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	b, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("key file = %v, %v; want 0600, %d bytes", fi, err, KeySize)
	}
	s1, _ := b.Seal([]byte("hunter2"))
	s2, _ := b.Seal([]byte("hunter2"))
	if s1 == s2 || strings.Contains(s1, "hunter2") || !strings.HasPrefix(s1, "v1:") {
		t.Errorf("sealed values %q, %q: want different, prefixed, no plain text", s1, s2)
	}
	// The same data dir gives the same key: what was sealed opens.
	b2, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b2.Open(s1); err != nil || string(got) != "hunter2" {
		t.Errorf("Open = %q, %v", got, err)
	}
	// Another key, a damaged value, garbage: ErrOpen.
	other, _ := Load(t.TempDir(), "")
	damaged := s1[:len(s1)-4] + "AAAA"
	for _, c := range []struct {
		box *Box
		s   string
	}{{other, s1}, {b, damaged}, {b, "v1:!!"}, {b, "plain"}, {b, ""}} {
		if _, err := c.box.Open(c.s); !errors.Is(err, ErrOpen) {
			t.Errorf("Open(%q) = %v, want ErrOpen", c.s, err)
		}
	}
	// An operator's key.
	key := bytes.Repeat([]byte{7}, KeySize)
	ob, err := Load(t.TempDir(), base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	ob2, _ := New(key)
	s, _ := ob.Seal([]byte("x"))
	if got, err := ob2.Open(s); err != nil || string(got) != "x" {
		t.Errorf("operator key round trip = %q, %v", got, err)
	}
	if _, err := Load(t.TempDir(), "short"); err == nil {
		t.Error("a bad operator key was accepted")
	}
}
