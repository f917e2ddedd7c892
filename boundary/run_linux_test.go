package boundary

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOnlyWayOutIsTheProxy: from the namespace, TCP to any address
// reaches the proxy, which reads the original destination; DNS to any
// server (a loopback stub too) reaches its resolver; other UDP and ICMP
// reach nothing; loopback is the namespace's own.
func TestOnlyWayOutIsTheProxy(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	hostTCP, hostUDP := hostListeners(t)
	out, code := runProbe(t, Config{Proxy: p.addr},
		"tcp", "93.184.216.34:80",
		"tcp", "10.255.255.1:443",
		"tcp", "127.0.0.1:"+fmt.Sprint(hostTCP.Port()),
		"udp", "127.0.0.53:53",
		"udp", "10.255.255.53:53",
		"udp", "10.255.255.53:5353",
		"udp", fmt.Sprintf("10.255.255.53:%d", hostUDP),
		"icmp", "10.255.255.1",
		"lo",
		"ns",
	)
	if code != 0 {
		t.Fatalf("probe exit %d\n%s", code, out)
	}
	want := []string{
		"tcp 93.184.216.34:80 -> proxy saw 93.184.216.34:80",
		"tcp 10.255.255.1:443 -> proxy saw 10.255.255.1:443",
		"udp 127.0.0.53:53 -> dns ping",
		"udp 10.255.255.53:53 -> dns ping",
		"udp 10.255.255.53:5353 -> dropped",
		fmt.Sprintf("udp 10.255.255.53:%d -> dropped", hostUDP),
		"icmp 10.255.255.1 -> dropped",
		"lo  -> own loopback",
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("want %q in\n%s", w, out)
		}
	}
	// The host's loopback listener is not the namespace's.
	if line := lineOf(out, "tcp 127.0.0.1:"); !strings.Contains(line, "connection refused") {
		t.Errorf("host loopback from the namespace: %q, want connection refused", line)
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	if line := lineOf(out, "ns "); strings.HasSuffix(line, self) {
		t.Errorf("the command ran in the host's namespace: %s", line)
	}
}

// TestHostServicesUnreachable: the host side of the link is a host
// address; its TCP services are the proxy (DNATed) and its UDP ones and
// ICMP are not reached.
func TestHostServicesUnreachable(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	_, hostUDP := hostListeners(t)
	// A range of one /30: the host side is 100.126.255.253.
	cfg := Config{Proxy: p.addr, Range: netip.MustParsePrefix("100.126.255.252/30")}
	out, _ := runProbe(t, cfg,
		"tcp", "100.126.255.253:22",
		"udp", fmt.Sprintf("100.126.255.253:%d", hostUDP),
		"icmp", "100.126.255.253",
	)
	for _, w := range []string{
		"tcp 100.126.255.253:22 -> proxy saw 100.126.255.253:22",
		fmt.Sprintf("udp 100.126.255.253:%d -> dropped", hostUDP),
		"icmp 100.126.255.253 -> dropped",
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("want %q in\n%s", w, out)
		}
	}
}

func lineOf(out, prefix string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestRunsAsUID: --uid and --gid, and what nobody can still do.
func TestRunsAsUID(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	nobody := uint32(65534)
	out, code := runProbe(t, Config{Proxy: p.addr, UID: &nobody}, "id", "tcp", "192.0.2.1:80", "udp", "192.0.2.53:53")
	if code != 0 {
		t.Fatalf("probe exit %d\n%s", code, out)
	}
	for _, w := range []string{"id  -> uid=65534 gid=65534", "tcp 192.0.2.1:80 -> proxy saw 192.0.2.1:80", "udp 192.0.2.53:53 -> dns ping"} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("want %q in\n%s", w, out)
		}
	}
}

// TestExitStatus: the command's exit status is Run's, 128+N when signal N
// killed it.
func TestExitStatus(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	if _, code := runProbe(t, Config{Proxy: p.addr}, "exit", "7"); code != 7 {
		t.Errorf("exit 7: Run returned %d", code)
	}
	code, err := Run(t.Context(), Config{Proxy: p.addr}, exec.Command("/bin/sh", "-c", "kill -TERM $$"))
	if err != nil || code != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: Run returned %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
	}
	if _, err := Run(t.Context(), Config{Proxy: p.addr}, exec.Command("/nonexistent/cmd")); err == nil {
		t.Error("a command that does not exist: no error")
	}
	if l := leftovers(t, os.Getpid()); len(l) > 0 {
		t.Errorf("after the runs: %v", l)
	}
}

// TestMissingPrivileges: a run without CAP_NET_ADMIN says so.
func TestMissingPrivileges(t *testing.T) {
	needRoot(t)
	run := role(t, "run", "127.0.0.1:3129", "/bin/true")
	run.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := run.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("run as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), ErrPrivileges.Error()) {
		t.Errorf("run as nobody said\n%s\nwant %q", out, ErrPrivileges)
	}
}

// startRun starts a run process whose command (a shell) starts a
// grandchild and prints "pids SHELL GRANDCHILD", then waits.
func startRun(t *testing.T, p *fakeProxy) (run *exec.Cmd, shell, grandchild int, exited chan error) {
	t.Helper()
	run = role(t, "run", p.addr.String(), "/bin/sh", "-c", `sleep 60 & echo "pids $$ $!"; wait`)
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a pipe: the grandchild, alive after a SIGKILL, would
	// hold a pipe open and Wait with it.
	stderr, err := os.Create(t.TempDir() + "/stderr")
	if err != nil {
		t.Fatal(err)
	}
	run.Stderr = stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	t.Cleanup(func() {
		if run.ProcessState == nil {
			run.Process.Kill()
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		run.Process.Kill()
		run.Wait()
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("run printed nothing\n%s", msg)
	}
	if _, err := fmt.Sscanf(lines.Text(), "pids %d %d", &shell, &grandchild); err != nil {
		t.Fatalf("run printed %q", lines.Text())
	}
	go func() { exited <- run.Wait() }()
	return run, shell, grandchild, exited
}

// waitExit waits for a run process, up to 10s.
func waitExit(t *testing.T, run *exec.Cmd, exited chan error) error {
	t.Helper()
	select {
	case err := <-exited:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("run %d did not exit within 10s", run.Process.Pid)
		return nil
	}
}

// TestLeavesNothingAfterExit: a process the command left behind is killed
// with the namespace; no link or table remains.
func TestLeavesNothingAfterExit(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	pidFile := t.TempDir() + "/pid"
	code, err := Run(t.Context(), Config{Proxy: p.addr},
		exec.Command("/bin/sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & echo $! >"+pidFile))
	if err != nil || code != 0 {
		t.Fatalf("Run: %d, %v", code, err)
	}
	var pid int
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Sscan(string(data), &pid)
	if pid == 0 || alive(pid) {
		t.Errorf("the command's background process %d still runs", pid)
	}
	if l := leftovers(t, os.Getpid()); len(l) > 0 {
		t.Errorf("after the run: %v", l)
	}
}

// TestLeavesNothingAfterSIGTERM: SIGTERM to run reaches the command, and
// run cleans up and exits with its status.
func TestLeavesNothingAfterSIGTERM(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	run, shell, grandchild, exited := startRun(t, p)
	if len(leftovers(t, run.Process.Pid)) != 2 {
		t.Errorf("while running: %v, want its link and table", leftovers(t, run.Process.Pid))
	}
	run.Process.Signal(syscall.SIGTERM)
	err := waitExit(t, run, exited)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("run after SIGTERM: %v, want exit %d", err, 128+int(syscall.SIGTERM))
	}
	for _, pid := range []int{shell, grandchild} {
		if alive(pid) {
			t.Errorf("process %d still runs", pid)
		}
	}
	if l := leftovers(t, run.Process.Pid); len(l) > 0 {
		t.Errorf("after SIGTERM: %v", l)
	}
}

// TestLeavesNothingAfterSIGKILL: run killed leaves its command dead and,
// after the next run, no link, table or process.
func TestLeavesNothingAfterSIGKILL(t *testing.T) {
	needRoot(t)
	p := startFakeProxy(t)
	run, shell, grandchild, exited := startRun(t, p)
	run.Process.Kill()
	waitExit(t, run, exited)
	// Pdeathsig: the command dies with run.
	waitFor(t, "the command to die with run", func() bool { return !alive(shell) })
	// What the next run must clean: the table, and the command's child,
	// which keeps the namespace and its link.
	if l := leftovers(t, run.Process.Pid); len(l) != 2 || !alive(grandchild) {
		t.Fatalf("after SIGKILL: %v, child alive %v: the test needs the link, the table and the child", l, alive(grandchild))
	}
	if code, err := Run(t.Context(), Config{Proxy: p.addr}, exec.Command("/bin/true")); err != nil || code != 0 {
		t.Fatalf("second run: %d, %v", code, err)
	}
	if alive(grandchild) {
		t.Errorf("the command's child %d still runs after the next run", grandchild)
	}
	if l := leftovers(t, run.Process.Pid); len(l) > 0 {
		t.Errorf("after SIGKILL and another run: %v", l)
	}
}

// waitFor polls cond (a process's death has no event to wait on here),
// up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
