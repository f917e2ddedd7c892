package jsonlex

import "testing"

func TestSkipSpace(t *testing.T) {
	for _, c := range []struct {
		in   string
		i, j int
	}{
		{"", 0, 0},
		{" \t\r\n x", 0, 5},
		{"x ", 0, 0},
		{"x  ", 1, 3},
		{"\v", 0, 0}, // not JSON whitespace
	} {
		if j := SkipSpace([]byte(c.in), c.i); j != c.j {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", c.in, c.i, j, c.j)
		}
	}
}

func TestEmpty(t *testing.T) {
	for _, c := range []struct {
		in      string
		closing byte
		j       int
		empty   bool
	}{
		{"{}", '}', 2, true},
		{"{ \n}", '}', 4, true},
		{"[ ]", ']', 3, true},
		{"[ }", ']', 2, false},
		{"{ \"a\"", '}', 2, false},
		{"{  ", '}', 3, false},
	} {
		j, empty := Empty([]byte(c.in), 1, c.closing)
		if j != c.j || empty != c.empty {
			t.Errorf("Empty(%q, 1, %q) = %d, %v, want %d, %v", c.in, c.closing, j, empty, c.j, c.empty)
		}
	}
}

func TestNext(t *testing.T) {
	for _, c := range []struct {
		in       string
		closing  byte
		j        int
		done, ok bool
	}{
		{"1, 2", ']', 2, false, true},
		{"1 ]", ']', 3, true, true},
		{"1 }", '}', 3, true, true},
		{"1 }", ']', 2, false, false},
		{"1  ", ']', 3, false, false}, // end of body: j is len(b)
		{"1 :", '}', 2, false, false},
	} {
		j, done, ok := Next([]byte(c.in), 1, c.closing)
		if j != c.j || done != c.done || ok != c.ok {
			t.Errorf("Next(%q, 1, %q) = %d, %v, %v, want %d, %v, %v", c.in, c.closing, j, done, ok, c.j, c.done, c.ok)
		}
	}
}
