package policy

import (
	"strings"
	"testing"
)

func TestValidHostPattern(t *testing.T) {
	valid := []string{
		"example.com", "API.GitHub.com.", "*.example.com", "*-aiplatform.googleapis.com",
		"**.example.com", "api-*.example.com", "a*b*.example.com", "10.0.0.5", "fd00::1", "[fd00::1]",
		"_dmarc.example.com", "localhost",
	}
	for _, p := range valid {
		if err := ValidHostPattern(p); err != nil {
			t.Errorf("ValidHostPattern(%q) = %v, want nil", p, err)
		}
	}
	invalid := []string{
		"", "*", "**", "*.com", "**.com", "foo.*.com", "foo.**.x", "example.*",
		"foo**.example.com", "***.example.com", "a..b", ".example.com", "exa mple.com",
		"0x7f000001", "127.1", "[fe80::1%eth0]", "::ffff:zz", "foo.bar*.com",
	}
	for _, p := range invalid {
		if err := ValidHostPattern(p); err == nil {
			t.Errorf("ValidHostPattern(%q) = nil, want an error", p)
		}
	}
}

func TestMatchHost(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "EXAMPLE.com.", true},
		{"Example.COM.", "example.com", true},
		{"example.com", "www.example.com", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "API.Example.Com.", true},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", "example.com", false},
		{"*.example.com", ".example.com", false},
		{"*-aiplatform.googleapis.com", "us-central1-aiplatform.googleapis.com", true},
		{"*-aiplatform.googleapis.com", "aiplatform.googleapis.com", false},
		{"*-aiplatform.googleapis.com", "x.y-aiplatform.googleapis.com", false},
		{"**.example.com", "a.example.com", true},
		{"**.example.com", "a.b.c.example.com", true},
		{"**.example.com", "example.com", false},
		{"**.example.com", "evil-example.com", false},
		{"**.example.com", "a..example.com", false},
		{"*", "example.com", false},
		{"*.com", "example.com", false},
		{"10.0.0.5", "10.0.0.5", true},
		{"10.0.0.5", "167772165", true},
		{"10.0.0.5", "012.0.0.5", true},
		{"10.0.0.5", "[::ffff:10.0.0.5]", true},
		{"10.0.0.5", "10.0.0.6", false},
		{"fd00::1", "[FD00::1]", true},
		{"*.example.com", "10.0.0.5", false},
	}
	for _, tt := range tests {
		if got := MatchHost(tt.pattern, tt.host); got != tt.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}

func TestValidGlob(t *testing.T) {
	for _, p := range []string{"/v1/*", "/repos/**", "**/python3", "/a/**/b", "tools/*", "get_?", "[a-z]*", "[!0]x", "[^0]x", `\*`, "[]]", "[a-]"} {
		if err := ValidGlob(p); err != nil {
			t.Errorf("ValidGlob(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"", "/a**", "/**x/y", "/a/***", "[a-z", "[z-a]", `a\`, "[/]", "[]"} {
		if err := ValidGlob(p); err == nil {
			t.Errorf("ValidGlob(%q) = nil, want an error", p)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"/v1/*", "/v1/orders", true},
		{"/v1/*", "/v1/orders/7", false}, // divergence: * does not cross /
		{"/v1/*", "/v1/", true},
		{"/v1/*", "/v1", false},
		{"/repos/**", "/repos", true},
		{"/repos/**", "/repos/", true},
		{"/repos/**", "/repos/a/b/c", true},
		{"/repos/**", "/reposx", false},
		{"/a/**/b", "/a/b", true},
		{"/a/**/b", "/a/x/y/b", true},
		{"/a/**/b", "/a/x/y/c", false},
		{"/**", "/", true},
		{"/**", "/anything/at/all", true},
		{"**", "/usr/bin/x", true},
		{"**/python3", "/usr/bin/python3", true},
		{"**/python3", "/usr/bin/python3.12", false},
		{"/usr/bin/python*", "/usr/bin/python3.12", true},
		{"/usr/bin/*", "/usr/bin/sub/x", false},
		{"/sandbox/.vscode-server/**", "/sandbox/.vscode-server/bin/abc/node", true},
		{"/v?/x", "/v1/x", true},
		{"/v?/x", "/v/x", false},
		{"/v?/x", "/v//x", false},
		{"/v[0-9]/x", "/v7/x", true},
		{"/v[0-9]/x", "/va/x", false},
		{"/v[!0]/x", "/v1/x", true},
		{"/v[!0]/x", "/v0/x", false},
		{"/v[^0]/x", "/v0/x", false},
		{`/a\*b`, "/a*b", true},
		{`/a\*b`, "/axb", false},
		{"tools/*", "tools/call", true},
		{"tools/*", "resources/read", false},
		{"get_*", "get_order", true},
		{"get_*", "set_order", false},
		{"*", "", true},
		{"*", "a/b", false},
		{"/a/*b*c", "/a/xxbyyc", true},
		{"/a/*b*c", "/a/xxbyyd", false},
		{"[a-z", "[a-z", false}, // invalid patterns match nothing
	}
	for _, tt := range tests {
		if got := MatchGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		raw       string
		slash     bool
		want      string
		wantError bool
	}{
		{raw: "/v1/orders", want: "/v1/orders"},
		{raw: "", want: "/"},
		{raw: "/", want: "/"},
		{raw: "/a/../admin", want: "/admin"},
		{raw: "/a/./b", want: "/a/b"},
		{raw: "/a/%2e%2e/admin", want: "/admin"},
		{raw: "/a/%2E%2E/admin", want: "/admin"},
		{raw: "/a/.%2e/admin", want: "/admin"},
		{raw: "/a/%2e/b", want: "/a/b"},
		{raw: "/../../etc/passwd", want: "/etc/passwd"},
		{raw: "/a/b/..", want: "/a/"},
		{raw: "/a/b/.", want: "/a/b/"},
		{raw: "/a//b", want: "/a/b"},
		{raw: "//a///b//", want: "/a/b/"},
		{raw: "/a/b/", want: "/a/b/"},
		{raw: "/a?x=1&y=/../", want: "/a"},
		{raw: "/%61dmin", want: "/admin"},
		{raw: "/a%3ab", want: "/a:b"},
		{raw: "/a b", want: "/a%20b"},
		{raw: "/a%20b", want: "/a%20b"},
		{raw: "/%e2%82%ac", want: "/%E2%82%AC"},
		{raw: "/a%25b", want: "/a%25b"},
		{raw: "/a%3Fb", want: "/a%3Fb"},
		{raw: "/a%2Fb", wantError: true},
		{raw: "/caf\u00e9", wantError: true}, // raw non-ASCII: percent-encode it (OpenShell path.rs)
		{raw: "/caf%C3%A9", want: "/caf%C3%A9"},
		{raw: "/a%2fb", wantError: true},
		{raw: "/a%5Cb", wantError: true},
		{raw: "/a%2Fb", slash: true, want: "/a%2Fb"},
		{raw: "/a%5cb", slash: true, want: "/a%5Cb"},
		// A dot segment behind an encoded separator is refused (OpenShell's
		// residual-dot check): a server that decodes first reads it.
		{raw: "/a%2F..%2Fb", slash: true, wantError: true},
		{raw: "/public/..%2fsecret", slash: true, wantError: true},
		{raw: "/public/.%2fsecret", slash: true, wantError: true},
		{raw: "/public/..%2f..%2fsecret", slash: true, wantError: true},
		{raw: "/public/x%2F.", slash: true, wantError: true},
		{raw: "/public/..%5Cx", slash: true, wantError: true},
		{raw: "/public/..%3B/secret", wantError: true},
		{raw: "/public/..%3bx/secret", wantError: true},
		{raw: "/public/.%3B", wantError: true},
		{raw: "/public/x%3B..", want: "/public/x%3B.."}, // after the ';': a parameter, never a segment
		{raw: "/repos/group%2fproject/issues", slash: true, want: "/repos/group%2Fproject/issues"},
		{raw: "/a%2F...%2Fb", slash: true, want: "/a%2F...%2Fb"},
		{raw: `/a\b`, wantError: true},
		{raw: `/a\b`, slash: true, wantError: true},
		{raw: "/a%00b", wantError: true},
		{raw: "/a\x00b", wantError: true},
		{raw: "/a%0ab", wantError: true},
		{raw: "/a\tb", wantError: true},
		{raw: "/a%7f", wantError: true},
		{raw: "/a%zz", wantError: true},
		{raw: "/a%4", wantError: true},
		{raw: "/a%", wantError: true},
		{raw: "/a#frag", wantError: true},
		{raw: "a/b", wantError: true},
		{raw: "*", wantError: true},
		// `;` parameters are stripped per segment before dot segments are
		// resolved, as OpenShell's l7/path.rs does.
		{raw: "/public/..;/admin", want: "/admin"},
		{raw: "/public/..;x/admin", want: "/admin"},
		{raw: "/public/..;jsessionid=xyz/secret", want: "/secret"},
		{raw: "/public/.;x/admin", want: "/public/admin"},
		{raw: "/public/.;/admin", want: "/public/admin"},
		{raw: "/public/%2e%2e;/admin", want: "/admin"},
		{raw: "/public;x=1/../secret", want: "/secret"},
		{raw: "/a;b/c", want: "/a/c"},
		{raw: "/admin;jsessionid=x/keys", want: "/admin/keys"},
		{raw: "/a/;/secret", want: "/a/secret"},
		{raw: "/a/;x", want: "/a/"},
		{raw: "/a;%zz/b", want: "/a/b"}, // the parameter is dropped unread
		{raw: "/..;", want: "/"},
		// An encoded `;` is data and stays encoded.
		{raw: "/admin%3Bx/keys", want: "/admin%3Bx/keys"},
		{raw: "/admin%3bx/keys", want: "/admin%3Bx/keys"},
		{raw: "/a%3B", want: "/a%3B"},
		// A trailing %2e is a dot, kept: only a whole `.` segment resolves.
		{raw: "/admin%2e", want: "/admin."},
		{raw: "/admin/%2e", want: "/admin/"},
	}
	for _, tt := range tests {
		got, err := CanonicalPath(tt.raw, tt.slash)
		if tt.wantError {
			if err == nil {
				t.Errorf("CanonicalPath(%q, %v) = %q, want an error", tt.raw, tt.slash, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CanonicalPath(%q, %v) = %q, %v; want %q", tt.raw, tt.slash, got, err, tt.want)
		}
	}
}

// TestCanonicalPathIdempotent checks that the canonical form is a fixed
// point: canonicalising it again changes nothing.
func TestCanonicalPathIdempotent(t *testing.T) {
	for _, raw := range []string{"/a/../b/./c//d/", "/%61%3a%20x", "/x%2Fy/../z", "/..", "/a/b/.."} {
		once, err := CanonicalPath(raw, true)
		if err != nil {
			t.Fatalf("CanonicalPath(%q): %v", raw, err)
		}
		twice, err := CanonicalPath(once, true)
		if err != nil || twice != once {
			t.Errorf("CanonicalPath(%q) = %q, again = %q, %v", raw, once, twice, err)
		}
	}
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/a/../b", "/%2e%2e/x", "//a//", "/a%2Fb", "/x?y"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, slash bool) {
		once, err := CanonicalPath(raw, slash)
		if err != nil {
			return
		}
		if once == "" || once[0] != '/' {
			t.Fatalf("CanonicalPath(%q) = %q does not start with /", raw, once)
		}
		twice, err := CanonicalPath(once, slash)
		if err != nil || twice != once {
			t.Fatalf("not idempotent: %q → %q → %q, %v", raw, once, twice, err)
		}
	})
}

func FuzzParseHostIP(f *testing.F) {
	for _, s := range []string{"127.1", "0xA9FEA9FE", "[::1]", "2852039166", "1.2.3.4."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		a, ok := ParseHostIP(host)
		if ok && (!a.IsValid() || a.Is4In6() || a.Zone() != "") {
			t.Fatalf("ParseHostIP(%q) = %v: not a plain unmapped address", host, a)
		}
	})
}

func TestMatchDenyGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"/v1/*", "/v1/orders", true},
		{"/v1/*", "/v1/orders/7", true}, // OpenShell's reading: * crosses /
		{"/repos/*/rulesets", "/repos/a/b/rulesets", true},
		{"/repos/**", "/repos", true}, // the narrow reading's matches stay
		{"/a?c", "/a/c", true},
		{"/v1/*", "/v2/x", false},
		{"/x/[", "/x/[", false}, // invalid patterns match nothing
	}
	for _, tt := range tests {
		if got := MatchDenyGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchDenyGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// TestGlobHostileInputIsFast: patterns with many stars against long
// non-matching strings must not backtrack exponentially (the proxy and the
// validator match untrusted paths and tool names against them).
func TestGlobHostileInputTerminates(t *testing.T) {
	long := strings.Repeat("a", 4000)
	stars := strings.Repeat("*a", 40) + "*b"
	segStars := "/" + strings.Repeat("**/a/", 30) + "b"
	segPath := strings.Repeat("/a", 2000)
	cases := []struct {
		name string
		f    func() bool
	}{
		{"MatchGlob stars", func() bool { return MatchGlob("/"+stars, "/"+long) }},
		{"MatchDenyGlob stars", func() bool { return MatchDenyGlob("/"+stars, "/"+long) }},
		{"MatchGlob **", func() bool { return MatchGlob(segStars, segPath) }},
		{"MatchDenyGlob **", func() bool { return MatchDenyGlob(segStars, segPath) }},
		{"query value", func() bool { return (&Matcher{Any: []string{stars}}).matchesValue(long, true) }},
	}
	// No timer here (timing thresholds do not belong in unit tests): the
	// backtracking matchers these replaced run for minutes on these inputs,
	// so a regression shows up as this test hitting go test's -timeout.
	for _, c := range cases {
		if c.f() {
			t.Errorf("%s: matched, want no match", c.name)
		}
	}
}

// refMatchChars and refMatchSegments are the plain backtracking matchers
// the linear ones replaced: exponential, but obviously right. FuzzGlob
// checks that both agree.
func refMatchChars(pat, s string) bool {
	if pat == "" {
		return s == ""
	}
	switch pat[0] {
	case '*':
		rest := strings.TrimLeft(pat, "*")
		for i := 0; i <= len(s); i++ {
			if refMatchChars(rest, s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && refMatchChars(pat[1:], s[1:])
	case '[':
		class, n, err := parseClass(pat)
		return err == nil && s != "" && class(s[0]) && refMatchChars(pat[n:], s[1:])
	case '\\':
		return len(pat) > 1 && s != "" && s[0] == pat[1] && refMatchChars(pat[2:], s[1:])
	default:
		return s != "" && s[0] == pat[0] && refMatchChars(pat[1:], s[1:])
	}
}

func refMatchSegments(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		for skip := 0; skip <= len(segs); skip++ {
			if refMatchSegments(pat[1:], segs[skip:]) {
				return true
			}
		}
		return false
	}
	return len(segs) > 0 && refMatchChars(pat[0], segs[0]) && refMatchSegments(pat[1:], segs[1:])
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"/a/**/b*", "/a/x/y/bc"}, {"/v1/*", "/v1/a/b"}, {"*a*b", "xaxb"}, {"[!a-c]?\\*", "d/*"},
		{"**/x", "/x"}, {"/a/**", "/a"}, {"a[", "a["},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, s string) {
		if len(pat) > 24 || len(s) > 24 {
			return // the reference is exponential
		}
		if got, want := matchChars(pat, s), refMatchChars(pat, s); got != want {
			t.Fatalf("matchChars(%q, %q) = %v, reference %v", pat, s, got, want)
		}
		if ValidGlob(pat) != nil {
			return
		}
		want := refMatchSegments(strings.Split(pat, "/"), strings.Split(s, "/"))
		if got := MatchGlob(pat, s); got != want {
			t.Fatalf("MatchGlob(%q, %q) = %v, reference %v", pat, s, got, want)
		}
	})
}

func TestMatchDenyGlobTrailingSlash(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"/admin", "/admin/", true},
		{"/repos/*/rulesets", "/repos/a/rulesets/", true},
		{"/admin", "/admin//", false}, // not canonical: CanonicalPath collapses it first
		{"/admin", "/administrator/", false},
	} {
		if got := MatchDenyGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchDenyGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
		if MatchGlob(tt.pattern, tt.s) && tt.pattern == "/admin" {
			t.Errorf("MatchGlob(%q, %q): allow globs keep the exact reading", tt.pattern, tt.s)
		}
	}
}

func TestExactGlobs(t *testing.T) {
	for _, tc := range []struct {
		glob     string
		wildcard bool
		exact    string // what UnescapeGlob returns
	}{
		{"/v1/orders", false, "/v1/orders"},
		{"/v1/*", true, ""},
		{"a?b", true, ""},
		{"[ab]", true, ""},
		{`a\*b`, false, "a*b"},
		{`a\\*`, true, ""},
		{`a\?\[\\`, false, `a?[\`},
		{`trailing\`, false, `trailing\`},
	} {
		if got := HasWildcard(tc.glob); got != tc.wildcard {
			t.Errorf("HasWildcard(%q) = %v, want %v", tc.glob, got, tc.wildcard)
		}
		if tc.wildcard {
			continue
		}
		exact := UnescapeGlob(tc.glob)
		if exact != tc.exact {
			t.Errorf("UnescapeGlob(%q) = %q, want %q", tc.glob, exact, tc.exact)
		}
		if tc.glob != `trailing\` && !MatchGlob(tc.glob, exact) {
			t.Errorf("MatchGlob(%q, %q) = false, want true", tc.glob, exact)
		}
	}
	for _, s := range []string{"", "plain", "a*b?c[d]e\\f", `\\`, "tools/call"} {
		g := EscapeGlob(s)
		if HasWildcard(g) || UnescapeGlob(g) != s {
			t.Errorf("EscapeGlob(%q) = %q: HasWildcard %v, UnescapeGlob %q", s, g, HasWildcard(g), UnescapeGlob(g))
		}
	}
}
