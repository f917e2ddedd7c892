// Package webtest drives the console in a real headless Chromium for
// tests (chromedp): start a browser, run steps with a deadline, read the
// page, sign in, take screenshots. Without Chromium a test skips, except
// under CI=true, where it fails: CI installs Debian's chromium.
package webtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// StepTimeout bounds one Act or Value.
const StepTimeout = 20 * time.Second

// Chromium returns the path of a Chromium-like browser, or "".
func Chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser starts a headless Chromium that lives until the test ends and
// returns its context.
func Browser(t *testing.T) context.Context {
	t.Helper()
	path := Chromium()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed, and CI needs it for the console's browser tests: apt-get install -y chromium")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium): skipping a browser test")
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// No timeout: the browser lives as long as this first call's context.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// Act runs browser steps within StepTimeout; a failure shows the page.
func Act(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, PageText(ctx))
	}
}

// Value runs one action that yields a value within StepTimeout.
func Value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, PageText(ctx))
	}
	return v
}

// PageText is what the page shows, for failure messages.
func PageText(ctx context.Context) string {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return text
}

// TextOf waits for selector to be visible and returns its text.
func TextOf(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	Act(t, ctx, "wait for "+selector, chromedp.WaitVisible(chromedp.CSS(selector)))
	return Value(t, ctx, "read "+selector, chromedp.Text(chromedp.CSS(selector)))
}

// WaitText waits until the element with id has non-empty text.
func WaitText(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	return Value(t, ctx, "wait for text in #"+id,
		chromedp.Poll[string](fmt.Sprintf(`(document.getElementById(%q)?.textContent || "").trim()`, id)))
}

// SignIn opens the console at baseURL and signs in with token.
func SignIn(t *testing.T, ctx context.Context, baseURL, token string) {
	t.Helper()
	Act(t, ctx, "sign in",
		chromedp.Navigate(baseURL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin-button")),
	)
}

// ScreenshotDir is where a test's screenshots go: its temporary
// directory, or PORTCULLIS_CONSOLE_SCREENSHOTS to keep them.
func ScreenshotDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("PORTCULLIS_CONSOLE_SCREENSHOTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// Screenshot writes a full-page PNG to dir/name.
func Screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := Value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// Widths are the window widths the console is checked at: a laptop's and
// a desktop monitor's.
var Widths = []int64{1280, 1920}

// SetWidth resizes the page's viewport to width (height 1000).
func SetWidth(t *testing.T, ctx context.Context, width int64) {
	t.Helper()
	Act(t, ctx, fmt.Sprintf("resize to %d px", width), chromedp.EmulateViewport(width, 1000))
}

// ScreenshotWidths writes a full-page PNG of the page at each of Widths,
// as dir/name-WIDTH.png, and leaves the viewport at the first width.
func ScreenshotWidths(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	for _, w := range Widths {
		SetWidth(t, ctx, w)
		Screenshot(t, ctx, dir, fmt.Sprintf("%s-%d.png", name, w))
	}
	SetWidth(t, ctx, Widths[0])
}

// Overflowing returns the selectors' elements (CSS selector sel) whose
// content is wider than their box: a table cut off at the window's edge
// behind a scroll bar.
func Overflowing(t *testing.T, ctx context.Context, sel string) []string {
	t.Helper()
	js := fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.scrollWidth + ">" + e.clientWidth)`, sel)
	return Value(t, ctx, "overflow of "+sel, chromedp.Evaluate[[]string](js))
}
