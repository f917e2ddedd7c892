//go:build drills

package proxy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestDrillDataDir gives a proxy a data directory on a small tmpfs, fills
// it up (ENOSPC), then turns it read-only (EROFS), then restarts the proxy
// on it, then makes it writable again, pushing a new version through the
// gateway at each step while requests run.
//
// It asserts that every version pushed while the disk is full or
// read-only is ACKed (never NACKed: the gateway's record shows it applied
// and no NACK) and enforced (its new path allowed, removed paths denied);
// that the proxy says so in its log (the version could not be kept, the
// decision log cannot be written) and to the gateway, which counts it
// (portcullis_proxy_keep_failures_total); that restarted on the read-only
// directory it starts, enforces the version it kept and then the current
// one; that no request goes unanswered while it runs; and that once the
// disk is writable again the next version is kept.
//
// It needs root to mount the tmpfs: without root it is skipped, or fails
// under CI=true.
func TestDrillDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		const why = "the data-dir drill mounts a tmpfs and remounts it read-only, which needs root"
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	mount := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v\n%s", args, err, out)
		}
	}
	mount("-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", data)
	t.Cleanup(func() { exec.Command("umount", "-l", data).Run() })

	up, port := upstream(t)
	gw := startGateway(t, filepath.Join(dir, "gateway"))
	tokenFile := gw.api.createSandbox(t, dir, restDoc(port, "v1"))
	const id = "disk"
	start := func() *proxy {
		return startProxy(t, gw.url(), tokenFile, data, id, nil, "--max-reconnect-delay", "1s")
	}
	px := start()
	px.waitLog(t, 0, 30*time.Second, "version 1 applied", applied(1))
	px.waitStatus(t, up, "/v1/x", 200, 10*time.Second)

	// pushed commits doc and requires it ACKed and enforced: allow
	// answered 200, deny 403.
	var pushed, acked, nacked int
	push := func(doc, allow, deny string) uint32 {
		t.Helper()
		v := gw.api.set(t, doc)
		pushed++
		s := gw.api.waitStatus(t, id, func(s *portcullisv1.ProxyStatus) bool {
			return s.GetAppliedVersion() == v || s.GetLastNackVersion() == v
		})
		if s.GetLastNackVersion() == v {
			nacked++
			t.Fatalf("version %d NACKed: %s", v, s.GetLastNackError())
		}
		acked++
		px.waitStatus(t, up, allow, 200, 10*time.Second)
		if got, err := px.get(up, deny); got != 403 {
			t.Fatalf("version %d: %s answered %d (%v), want 403", v, deny, got, err)
		}
		return v
	}

	tr := drive(px, up, 5*time.Millisecond, "v1")
	// Full: a filler takes every block left.
	fill(t, filepath.Join(data, "filler"))
	time.Sleep(time.Second) // requests meet the full disk
	push(restDoc(port, "v1", "v2"), "/v2/x", "/v3/x")
	px.waitLog(t, 0, 10*time.Second, "the version could not be kept (ENOSPC)", func(l logLine) bool {
		return l.msg == "could not keep the applied version in the data dir" && strings.Contains(l.raw, "no space left on device")
	})
	px.waitLog(t, 0, 10*time.Second, "the decision log cannot be written", func(l logLine) bool {
		return strings.HasPrefix(l.msg, "decision log cannot be written")
	})

	// Read-only.
	mount("-o", "remount,ro", data)
	time.Sleep(time.Second) // requests meet the read-only disk
	from := px.logLen()
	v3 := push(restDoc(port, "v3"), "/v3/x", "/v1/x")
	px.waitLog(t, from, 10*time.Second, "the version could not be kept (EROFS)", func(l logLine) bool {
		return l.msg == "could not keep the applied version in the data dir" && strings.Contains(l.raw, "read-only file system")
	})
	outcomes := tr.halt()
	unanswered := 0
	var slowest time.Duration
	for _, o := range outcomes {
		if o.status == 0 {
			unanswered++
		}
		slowest = max(slowest, o.answered.Sub(o.sent))
	}

	// Restarted on the read-only directory: it starts, and follows the
	// gateway to the current version.
	px.stop()
	restartAt := time.Now()
	px = start()
	px.waitLog(t, 0, 30*time.Second, "the current version applied after the restart", applied(v3))
	px.waitStatus(t, up, "/v3/x", 200, 10*time.Second)
	restartToCurrent := time.Since(restartAt)
	if got, err := px.get(up, "/v1/x"); got != 403 {
		t.Fatalf("after the restart /v1 answered %d (%v), want 403", got, err)
	}

	// Writable again, room made: the next version is kept.
	mount("-o", "remount,rw", data)
	if err := os.Remove(filepath.Join(data, "filler")); err != nil {
		t.Fatal(err)
	}
	v4 := push(restDoc(port, "v4"), "/v4/x", "/v3/x")
	kept := keptVersion(t, filepath.Join(data, "policy.signed"))
	if s := gw.api.status(t, id); s.GetLastNackVersion() != 0 {
		t.Errorf("the proxy NACKed version %d: %s", s.GetLastNackVersion(), s.GetLastNackError())
	}
	keepFailures := gw.metric(t, "portcullis_proxy_keep_failures_total")
	figure(t, "drill=datadir pushed=%d acked=%d nacked=%d requests=%d unanswered=%d slowest_ms=%d restart_on_readonly_to_current_ms=%d kept_after_recovery=%d gateway_keep_failures=%.0f",
		pushed, acked, nacked, len(outcomes), unanswered, ms(slowest), ms(restartToCurrent), kept, keepFailures)
	// Versions 2 and 3, and 3 again after the restart.
	if keepFailures < 3 {
		t.Errorf("portcullis_proxy_keep_failures_total = %v, want the 3 versions the proxy could not keep", keepFailures)
	}
	if unanswered != 0 {
		t.Errorf("%d requests went unanswered while the disk was full or read-only", unanswered)
	}
	if kept != v4 {
		t.Errorf("with the disk writable again the data dir keeps version %d, want %d", kept, v4)
	}
}

// fill writes path until the file system has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

// keptVersion reads the version a proxy kept in its data dir.
func keptVersion(t *testing.T, path string) uint32 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sp portcullisv1.SignedPolicy
	if err := proto.Unmarshal(data, &sp); err != nil {
		t.Fatal(err)
	}
	return sp.GetVersion()
}
