// Package drillkit holds what the fault drills (drills/gateway,
// drills/proxy) share: the real portcullis binary built once per run,
// and a buffer the processes they start write their output to.
package drillkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Build builds cmd/portcullis with the build tags into a new temporary
// directory and returns the binary's path and a function removing the
// directory. The drills run the binary a user runs, except for what the
// tags add (-tags drills: cmd/portcullis/drillhook_on.go).
func Build(tags ...string) (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "portcullis-drills-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "portcullis")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/portcullis-dev/portcullis/cmd/portcullis")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, remove, nil
}

// LockedBuffer collects a process's output (its stdout and stderr may
// write at once) for failure messages and log checks.
type LockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
