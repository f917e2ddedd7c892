//go:build linux

package identity

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os/exec"
	"slices"
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

// TestWatch: a caller is named only if the same processes held its socket
// at accept (Follow) and at judgement (Caller).
func TestWatch(t *testing.T) {
	cb := buildCallers(t)

	t.Run("one holder throughout", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		w := Follow(conn, false)
		if got, err := w.Caller(); err != nil || got.Binary != cb.a {
			t.Errorf("Caller = %+v, %v; want %s", got, err, cb.a)
		}
	})

	t.Run("a look after the request was sent is the judgement's", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		stop := startCaller(t, cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		sent, unsent := Follow(conn, true), Follow(conn, false)
		stop() // a exits: a second look would find no holder
		if got, err := sent.Caller(); err != nil || got.Binary != cb.a {
			t.Errorf("Caller (sent) = %+v, %v; want %s from the one look", got, err, cb.a)
		}
		if got, err := unsent.Caller(); !errors.Is(err, errSocketNotFound) {
			t.Errorf("Caller (not sent) = %+v, %v; want errSocketNotFound from the second look", got, err)
		}
	})

	t.Run("the holder exec'd another executable", func(t *testing.T) {
		// a connects; after the first look it becomes b (same pid and
		// start time), which writes the request. One look now sees b only.
		ln := listen(t, "tcp", "127.0.0.1:0")
		p := startPiped(t, cb.a, "-exec", cb.b, ln.Addr().String())
		p.expect("connected")
		conn := acceptWithin(t, ln)
		w := Follow(conn, false)
		if w.err != nil || w.first.exe != cb.a {
			t.Fatalf("at accept: %+v, %v; want a (%s)", w.first, w.err, cb.a)
		}
		p.say("exec")
		if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "ready b\n" {
			t.Fatalf("read %q, %v; want b's ready line", line, err)
		}
		if got, err := w.Caller(); !errors.Is(err, errHoldersChanged) || got.Binary != "" {
			t.Errorf("Caller = %+v, %v; want errHoldersChanged", got, err)
		}
		if got, err := Of(conn); err != nil || got.Binary != cb.b {
			t.Errorf("Of = %+v, %v; want b (one look cannot tell)", got, err)
		}
	})

	t.Run("unknown at accept stays unknown", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		a := startPiped(t, cb.a, "-dance", cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		a.expect("in flight")
		w := Follow(conn, false)
		if !errors.Is(w.err, errSocketInFlight) {
			t.Fatalf("at accept: %v; want errSocketInFlight", w.err)
		}
		if _, err := io.WriteString(conn, "the answer\n"); err != nil {
			t.Fatal(err)
		}
		a.say("take it back")
		a.expect("got the answer")
		// Both a's hold the socket now, one executable: one look names a.
		if got, err := Of(conn); err != nil || got.Binary != cb.a {
			t.Fatalf("Of = %+v, %v; want a", got, err)
		}
		if got, err := w.Caller(); !errors.Is(err, errSocketInFlight) || got.Binary != "" {
			t.Errorf("Caller = %+v, %v; want the error from accept", got, err)
		}
	})
}

func acceptWithin(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	if err := ln.(*net.TCPListener).SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetReadDeadline(deadline)
	return conn
}

func TestSightingSame(t *testing.T) {
	base := sighting{inode: 7, exe: "/bin/a", holders: []holder{{pid: 10, start: 100, exe: "/bin/a", fd: "3"}, {pid: 12, start: 120, exe: "/bin/a", fd: "4"}}}
	with := func(f func(*sighting)) sighting {
		s := base
		s.holders = slices.Clone(base.holders)
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name string
		s    sighting
		same bool
	}{
		{"identical", with(func(*sighting) {}), true},
		{"another fd of the same processes", with(func(s *sighting) { s.holders[0].fd = "9" }), true},
		{"a pid reused", with(func(s *sighting) { s.holders[1].start = 999 }), false},
		{"an executable changed", with(func(s *sighting) { s.holders[0].exe = "/bin/b" }), false},
		{"a holder gone", with(func(s *sighting) { s.holders = s.holders[:1] }), false},
		{"a holder more", with(func(s *sighting) { s.holders = append(s.holders, holder{pid: 14, start: 140, exe: "/bin/a"}) }), false},
		{"another socket", with(func(s *sighting) { s.inode = 8 }), false},
	} {
		if got := base.same(tc.s); got != tc.same {
			t.Errorf("%s: same = %v, want %v", tc.name, got, tc.same)
		}
	}
}

func TestScmFDs(t *testing.T) {
	for _, tc := range []struct {
		fdinfo string
		n      uint64
		ok     bool
	}{
		{"pos:\t0\nflags:\t02\nmnt_id:\t10\nino:\t60090\nscm_fds: 1\n", 1, true},
		{"pos:\t0\nflags:\t02\nmnt_id:\t10\nino:\t60090\nscm_fds: 0\n", 0, true},
		{"pos:\t0\nflags:\t02000002\nmnt_id:\t10\nino:\t60087\n", 0, false}, // a TCP socket
		{"scm_fds: lots\n", 1, true}, // unreadable: some
	} {
		if n, ok := scmFDs(tc.fdinfo); n != tc.n || ok != tc.ok {
			t.Errorf("scmFDs(%q) = %d, %v; want %d, %v", tc.fdinfo, n, ok, tc.n, tc.ok)
		}
	}
}

// BenchmarkWatch is what the proxy pays per connection when its policy
// names binaries: a look at accept and one at the first judgement.
func BenchmarkWatch(b *testing.B) {
	cb := buildCallers(b)
	ln := listen(b, "tcp", "127.0.0.1:0")
	startCaller(b, cb.a, ln.Addr().String())
	conn, _ := acceptReady(b, ln)
	cpu := cpuTime()
	for b.Loop() {
		if got, err := Follow(conn, false).Caller(); err != nil || got.Binary != cb.a {
			b.Fatalf("Caller = %q, %v", got.Binary, err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	procs, fds := countProcFDs()
	b.ReportMetric(float64(procs), "procs")
	b.ReportMetric(float64(fds), "fds")
}
