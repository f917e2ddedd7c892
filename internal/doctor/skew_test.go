package doctor

import "testing"

// Builds one minor version apart work together; further apart, or of
// another major version, do not; builds without a release version are
// not compared.
func TestSkew(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		bad  bool
	}{
		{"v1.4.2", "v1.4.0", false},
		{"v1.4.2", "v1.3.9 (abc123456789, 2026-01-02T03:04:05Z)", false},
		{"v1.3.0", "v1.4.0-rc.1", false},
		{"v1.4.0", "v1.2.7", true},
		{"v1.2.0", "v1.4.0", true},
		{"v2.0.0", "v1.9.0", true},
		{"devel", "v1.0.0", false},
		{"v0.0.0-20260102030405-5ae28d5a1b2c", "v3.1.0", false},
		{"", "v1.0.0", false},
		{"v1", "v9.0.0", false},
	} {
		if why := Skew(tc.a, tc.b); (why != "") != tc.bad {
			t.Errorf("Skew(%q, %q) = %q, want skewed %v", tc.a, tc.b, why, tc.bad)
		}
	}
}
