package spelling

import (
	"strings"
	"testing"
)

func TestNearest(t *testing.T) {
	keys := []string{"endpoints", "binaries", "name", "host", "port", "protocol", "network_policies"}
	for _, c := range []struct{ name, want string }{
		{"endpoint", "endpoints"},
		{"binareis", "binaries"},
		{"hst", "host"},
		{"prot", ""}, // a transposition is two edits
		{"protocl", "protocol"},
		{"colour", ""},
		{"network_policy", "network_policies"},
		{"networkpolicy", ""},
		{"hxyz", ""},
	} {
		if got := Nearest(c.name, keys, nil); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	// A name far longer than every candidate is no near miss, whatever
	// its size (and is not compared byte by byte: the lengths tell).
	if got := Nearest(strings.Repeat("network_policies", 1<<16), keys, nil); got != "" {
		t.Errorf("a 1 MiB name was offered %q", got)
	}
	if got := Nearest("hst", keys, func(k string) bool { return k == "host" }); got != "" {
		t.Errorf("a skipped candidate was offered: %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"port", "prot", 2}, {"same", "same", 0}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
