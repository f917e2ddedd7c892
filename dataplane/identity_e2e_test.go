//go:build linux

package dataplane_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/policy"
)

// TestBinaryIdentityThroughProxy runs real clients against a proxy that
// names them through /proc (the default Caller), under a policy that lets
// only the executable b reach the upstream. b itself is allowed. a, which
// lets a child b inherit its socket and keeps its own copy in flight
// (SCM_RIGHTS) while the proxy looks, is not: the proxy sees only b
// holding the socket, but b did not write the request.
func TestBinaryIdentityThroughProxy(t *testing.T) {
	a, b := buildCallerPair(t)
	up := startPlainUpstream(t)
	doc := strings.NewReplacer("PORT", strconv.Itoa(up.port), "EXE", b).Replace(`
version: 1
network_policies:
  b_only:
    endpoints:
      - { host: raw.example.com, port: PORT }
    binaries: [{path: EXE}]
`)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	request := fmt.Sprintf("GET http://raw.example.com:%d/x HTTP/1.1\r\nHost: raw.example.com:%d\r\nConnection: close\r\n\r\n", up.port, up.port)
	t.Setenv("CALLER_REQUEST", request)

	start := func(t *testing.T) (proxyAddr string, records chan decision.Record) {
		records = make(chan decision.Record, 8)
		p := newAgent(t, dataplane.Config{
			DevAllowLoopback: true, Resolve: fakeDNS,
			MaxConnections: 1, // a client waits in the backlog while another is served
			OnRecord:       func(r decision.Record) { records <- r },
			Logger:         slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err := p.SetPolicy(pol, "v1"); err != nil {
			t.Fatal(err)
		}
		return dataplanetest.Serve(t, p).Host, records
	}

	t.Run("b, holding its socket throughout, is allowed", func(t *testing.T) {
		proxyAddr, records := start(t)
		before := len(up.seen())
		c := startHelper(t, b, proxyAddr)
		select {
		case r := <-records:
			if r.Binary != b || r.Decision != decision.Allow {
				t.Errorf("recorded %s for %q (%s); want allowed for b", r.Decision, r.Binary, r.Reason)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no decision for b's request")
		}
		c.expect(t, "got HTTP/1.1 200 OK")
		if n := len(up.seen()) - before; n != 1 {
			t.Errorf("forwarded %d requests upstream, want 1", n)
		}
	})

	t.Run("a, its socket in flight and held by a child b, is not b", func(t *testing.T) {
		proxyAddr, records := start(t)
		// The one place is taken: a's connection waits to be accepted
		// while a writes its request and passes its socket away, so the
		// proxy's first look comes after the sleight of hand.
		blocker, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		before := len(up.seen())
		c := startHelper(t, a, "-dance", b, proxyAddr)
		c.expect(t, "in flight")
		blocker.Close()
		select {
		case r := <-records:
			if r.Binary != "" {
				t.Errorf("the request was recorded as %s's (%s: %s); want no binary", r.Binary, r.Decision, r.Reason)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no decision for a's request")
		}
		c.say(t, "take it back")
		c.expect(t, "got HTTP/1.1 403 Forbidden")
		if n := len(up.seen()) - before; n != 0 {
			t.Errorf("forwarded %d requests upstream, want none", n)
		}
	})
}

// buildCallerPair builds identity/testdata/caller twice, as the
// executables a and b, in a directory any user may enter (the clients run
// as helperUID when the test runs as root: root's own sockets are not
// identified, since PID 1's fds are not readable in this sandbox).
func buildCallerPair(t *testing.T) (a, b string) {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	dir, err := os.MkdirTemp("", "identity-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out [2]string
	for i, name := range []string{"a", "b"} {
		exe := filepath.Join(dir, "client-"+name)
		cmd := exec.Command(goCmd, "build", "-ldflags=-X main.name="+name, "-o", exe, "./identity/testdata/caller")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build caller %s: %v\n%s", name, err, b)
		}
		if out[i], err = filepath.EvalSymlinks(exe); err != nil {
			t.Fatal(err)
		}
	}
	return out[0], out[1]
}

// helperUID is the user the clients run as when the test runs as root
// (root's own sockets are not identified here): a user of their own, since
// what other processes of a socket's user do counts (descriptors in flight,
// a process hidden from the proxy), and the identity package's tests, run
// alongside, make nobody's processes do both.
const helperUID = 64123

// helper is a running client whose stdin and stdout the test drives.
type helper struct {
	in    io.WriteCloser
	lines chan string // stdout, a line at a time; closed at EOF
	err   *strings.Builder
}

func startHelper(t *testing.T, exe string, args ...string) *helper {
	t.Helper()
	cmd := exec.Command(exe, args...)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: helperUID, Gid: helperUID}}
	}
	h := &helper{lines: make(chan string, 16), err: new(strings.Builder)}
	cmd.Stderr = h.err
	var err error
	if h.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // ends at the process's EOF
		defer close(done)
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		h.in.Close()
		<-done
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s %v: %v\n%s", exe, args, err, h.err.String())
		}
	})
	return h
}

func (h *helper) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-h.lines:
		if !ok || got != want {
			t.Fatalf("client printed %q (open %v), want %q\n%s", got, ok, want, h.err.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("client did not print %q\n%s", want, h.err.String())
	}
}

func (h *helper) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}
