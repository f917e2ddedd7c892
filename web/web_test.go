package web_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/web"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// The Content-Security-Policy forbids inline script and style; the pages
// must not need them (a violation would only show in a browser's console).
func TestNoInlineScriptOrStyle(t *testing.T) {
	h := web.Handler()
	inlineScript := regexp.MustCompile(`(?is)<script(?:\s[^>]*)?>\s*[^<\s]`)
	for _, tc := range []struct{ path, bad string }{
		{"/", "<style"},
		{"/", " style="},
		{"/", " onclick="},
		{"/", " onload="},
		{"/", "javascript:"},
		{"/app.js", ".innerHTML"},
		{"/app.js", "insertAdjacentHTML"},
		{"/app.js", "eval("},
	} {
		code, body := get(t, h, tc.path)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d", tc.path, code)
		}
		if strings.Contains(body, tc.bad) {
			t.Errorf("%s contains %q", tc.path, tc.bad)
		}
	}
	if _, body := get(t, h, "/"); inlineScript.MatchString(body) {
		t.Error("index.html has an inline script")
	}
	if _, body := get(t, h, "/"); !strings.Contains(body, `<script type="module" src="app.js">`) {
		t.Error("index.html does not load app.js as a module")
	}
}

// Every asset the page names is served.
func TestAssetsServed(t *testing.T) {
	h := web.Handler()
	_, index := get(t, h, "/")
	for _, m := range regexp.MustCompile(`(?:src|href)="([a-z][a-z0-9.]+)"`).FindAllStringSubmatch(index, -1) {
		if code, _ := get(t, h, "/"+m[1]); code != http.StatusOK {
			t.Errorf("index.html names %s, served %d", m[1], code)
		}
	}
	if _, err := fs.Stat(web.Static(), "app.js"); err != nil {
		t.Error(err)
	}
}
