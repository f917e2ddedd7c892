// Package atomicfile owns writing a private file (mode 0600) so that a
// reader or a crash sees the old content or the new, never a mix: the CA's
// files (created once) and a gateway-mode proxy's kept policy version
// (replaced on every applied version) are written this way.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Create writes b to path with mode 0600, failing with os.ErrExist if path
// exists (two processes creating the same file: one wins).
func Create(path string, b []byte) error { return write(path, b, os.Link) }

// Replace writes b to path with mode 0600, replacing what is there.
func Replace(path string, b []byte) error { return write(path, b, os.Rename) }

// write writes b to a synced temporary file (mode 0600) beside path and
// puts it in place with place: os.Link (fail if path exists) or os.Rename
// (replace it).
func write(path string, b []byte, place func(tmp, path string) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return place(tmp.Name(), path)
}
