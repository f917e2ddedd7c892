//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// needRunRoot skips a test that makes namespaces unless it may (root) or
// must (CI=true).
func needRunRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("needs root: portcullis run makes a network namespace, a link and nftables rules (CI=true runs it anyway)")
	}
}

// transparentProxy stands in for the proxy's transparent listener: it
// answers each connection with its original destination.
func transparentProxy(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			raw, _ := c.(*net.TCPConn).SyscallConn()
			raw.Control(func(fd uintptr) {
				sa, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
				if err != nil {
					fmt.Fprintf(c, "no original destination: %v\n", err)
					return
				}
				b := sa.Multiaddr // a sockaddr_in
				fmt.Fprintf(c, "proxy saw %s\n", netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), uint16(b[2])<<8|uint16(b[3])))
			})
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestRunRedirectsToTheProxy: in-process, a command's connection to any
// address reaches the proxy with its original destination, and run exits
// with the command's status.
func TestRunRedirectsToTheProxy(t *testing.T) {
	needRunRoot(t)
	proxy := transparentProxy(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(runProbeEnv, "198.51.100.7:8443")
	// run's stdout is a buffer: the command writes through a pipe.
	out, stderr, code := runCLI(t, "run", "--proxy", proxy, "--sandbox", "orders", "--", self)
	if code != 0 || out != "proxy saw 198.51.100.7:8443\n" {
		t.Errorf("run: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	out, stderr, code = runCLI(t, "run", "--proxy", proxy, "/bin/sh", "-c", "echo hi; exit 5")
	if code != 5 || out != "hi\n" || stderr != "" {
		t.Errorf("exit 5: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestRunBinarySIGTERM: the real binary forwards SIGTERM to its command,
// exits with the command's status and leaves no link or table.
func TestRunBinarySIGTERM(t *testing.T) {
	needRunRoot(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	run := exec.Command(bin, "run", "--proxy", transparentProxy(t), "--", "/bin/sh", "-c", "echo started; exec sleep 60")
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill(); run.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("run printed %q", line)
	}
	run.Process.Signal(syscall.SIGTERM)
	err = run.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("after SIGTERM: %v, want exit %d", err, 128+int(syscall.SIGTERM))
	}
	if name := fmt.Sprintf("pcr%d", run.Process.Pid); interfaceExists(name) {
		t.Errorf("link %s remains", name)
	}
}

func interfaceExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}
