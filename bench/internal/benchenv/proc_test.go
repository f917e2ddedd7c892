package benchenv

import (
	"os"
	"testing"
	"time"
)

// TestCPUSince: a process in both snapshots counts its difference, a new
// one counts whole, and one gone counts nothing (a difference of sums
// would subtract its past).
func TestCPUSince(t *testing.T) {
	s := CPUSnapshot{1: 10 * time.Second, 2: 5 * time.Second}
	now := CPUSnapshot{1: 12 * time.Second, 3: time.Second}
	if got := s.Since(now); got != 3*time.Second {
		t.Fatalf("Since = %s, want 3s", got)
	}
	self := SnapshotCPU(func(p Proc) bool { return p.PID == os.Getpid() })
	if _, ok := self[os.Getpid()]; !ok || len(self) != 1 {
		t.Fatalf("SnapshotCPU of this process = %v", self)
	}
}
