package decision

import (
	"fmt"
	"strings"
	"testing"
)

// The memory keeps the newest entries within its bounds of entries and
// bytes, refuses what is larger than one entry may be, and hands out
// copies.
func TestArgumentsBounded(t *testing.T) {
	a := NewArguments(3, 100, 40)
	for i := range 5 {
		if !a.Put(fmt.Sprint("dn_", i), []byte(fmt.Sprintf(`{"i":%d}`, i))) {
			t.Fatalf("Put %d refused", i)
		}
	}
	if n, _ := a.Len(); n != 3 {
		t.Fatalf("%d entries kept, want 3", n)
	}
	for i := range 5 {
		got, ok := a.Get(fmt.Sprint("dn_", i))
		if want := i >= 2; ok != want {
			t.Errorf("Get dn_%d: kept = %v, want %v", i, ok, want)
		}
		if ok && string(got) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("Get dn_%d = %s", i, got)
		}
	}
	if a.Put("dn_big", []byte(strings.Repeat("x", 41))) {
		t.Error("an entry over the per-entry bound was kept")
	}
	if a.Put("dn_4", []byte(`{}`)) {
		t.Error("a second Put of one denial id replaced the first")
	}
	// Bytes: three entries of 40 bytes exceed 100, so only two stay.
	for i := range 3 {
		a.Put(fmt.Sprint("dn_b", i), []byte(strings.Repeat("y", 40)))
	}
	if n, b := a.Len(); n != 2 || b != 80 {
		t.Errorf("Len = %d entries, %d bytes; want 2, 80", n, b)
	}
	got, _ := a.Get("dn_b2")
	got[0] = 'z'
	if again, _ := a.Get("dn_b2"); again[0] != 'y' {
		t.Error("Get returned the kept slice, not a copy")
	}
}
