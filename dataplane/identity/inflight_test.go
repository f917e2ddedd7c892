//go:build linux

package identity

import (
	"bufio"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// piped is a caller whose stdin and stdout the test drives.
type piped struct {
	t     testing.TB
	in    io.WriteCloser
	lines chan string // its stdout, a line at a time; closed at EOF
	cmd   *exec.Cmd
	err   strings.Builder
}

// startPiped runs exe with args as the callers' user (callerUID).
func startPiped(t testing.TB, exe string, args ...string) *piped {
	t.Helper()
	p := &piped{t: t, lines: make(chan string, 16), cmd: exec.Command(exe, args...)}
	if uid := callerUID(); uid >= 0 {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	p.cmd.Stderr = &p.err
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // ends at the process's EOF
		defer close(done)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		p.in.Close()
		<-done
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("%s %v: %v\n%s", exe, args, err, p.err.String())
		}
	})
	return p
}

// expect waits for the next line of stdout and checks it is want.
func (p *piped) expect(want string) {
	p.t.Helper()
	select {
	case got, ok := <-p.lines:
		if !ok || got != want {
			p.t.Fatalf("caller printed %q (open %v), want %q\n%s", got, ok, want, p.err.String())
		}
	case <-time.After(20 * time.Second):
		p.t.Fatalf("caller did not print %q\n%s", want, p.err.String())
	}
}

func (p *piped) say(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// TestSocketInFlight is the attack on binary identity: a writes its
// request, lets its child b (an executable a rule may allow) inherit the
// socket, and keeps its own copy in flight in a unix socket (SCM_RIGHTS)
// while the proxy looks, to take it back for the response. Only b holds
// the socket then; the caller must be unknown, not b.
func TestSocketInFlight(t *testing.T) {
	cb := buildCallers(t)
	ln := listen(t, "tcp", "127.0.0.1:0")
	a := startPiped(t, cb.a, "-dance", cb.b, ln.Addr().String())
	conn, name := acceptReady(t, ln)
	if name != "a" {
		t.Fatalf("ready line from %q, want a", name)
	}
	a.expect("in flight")
	got, err := Of(conn)
	if !errors.Is(err, errSocketInFlight) || got.Binary != "" {
		t.Errorf("Of = %+v, %v; want an unknown caller (errSocketInFlight), not b (%s)", got, err, cb.b)
	}
	if _, err := io.WriteString(conn, "the answer\n"); err != nil {
		t.Fatal(err)
	}
	a.say("take it back")
	a.expect("got the answer") // a has its socket again: the answer was its
}
