//go:build unix

package secretbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadRefusesNonRegular: a directory, a FIFO (refused without
// waiting for a writer) and a link to either are not key files, whatever
// their mode.
func TestLoadRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sub, fifo, link} {
		if k, err := Load(p); k != nil || err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Load(%s) = %v, %v; want not a regular file", p, k, err)
		}
	}
	// A link to a regular key file is followed (mounted secrets are links).
	key := filepath.Join(dir, "key")
	want, err := Generate(key)
	if err != nil {
		t.Fatal(err)
	}
	keyLink := filepath.Join(dir, "key-link")
	if err := os.Symlink(key, keyLink); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(keyLink); err != nil || got.ID() != want.ID() {
		t.Errorf("Load(a link to a key file) = %v, %v", got, err)
	}
}
