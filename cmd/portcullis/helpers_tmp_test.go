package main

import (
	"strings"
	"testing"
)




func containsAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s does not contain %q:\n%s", what, want, out)
		}
	}
}

func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range lines(out) {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Errorf("no %q line in:\n%s", key, out)
	return ""
}
