//go:build linux

// Command caller is a test helper for procid_test.go: a real executable that
// connects to the proxy-side listener so CallerBinary can name it.
//
//	caller ADDR               connect, write "ready NAME\n", hold the connection until stdin closes;
//	                          with $CALLER_REQUEST set, write that instead and print "got LINE"
//	                          with the first line of the answer
//	caller -share CHILD ADDR  connect, then run CHILD -inherit with the connection as fd 3
//	                          (both processes hold the socket); wait for it
//	caller -inherit           write "ready NAME\n" to fd 3, hold it until stdin closes
//	caller -spawn EXE ARGS... run EXE ARGS... as a child (its own connection, if any) and wait
//	caller -dance CHILD ADDR  connect, run CHILD -hold with the connection as fd 3, write
//	                          "ready NAME\n" (or $CALLER_REQUEST) on it, pass our own copy to
//	                          ourselves over a unix socketpair (SCM_RIGHTS) and close it: only
//	                          CHILD holds the socket, ours is in flight; print "in flight" on
//	                          stdout. On a line on stdin, take the copy back, read a line from
//	                          the connection, print "got LINE", and wait until stdin closes
//	caller -hold              hold fd 3 without using it; print "held" on stdout; wait until
//	                          stdin closes
//	caller -exec CHILD ADDR   connect, print "connected" on stdout; on a line on stdin, exec
//	                          CHILD -inherit with the connection as fd 3 (same process, new
//	                          executable)
//
// With CALLER_NODUMP=1 in the environment, -inherit first makes its process
// non-dumpable (its /proc entries then need CAP_SYS_PTRACE to read), as an
// agent hiding a process from the proxy would.
//
// NAME is set at build time (-ldflags -X main.name=...), so two builds are
// two different executables.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

var name = "caller"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "caller:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 1 && args[0] == "-inherit":
		if os.Getenv("CALLER_NODUMP") == "1" {
			const prSetDumpable = 4
			if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
				return fmt.Errorf("prctl: %w", errno)
			}
		}
		return hold(os.NewFile(3, "inherited"))
	case len(args) == 3 && args[0] == "-share":
		conn, err := net.Dial("tcp", args[2])
		if err != nil {
			return err
		}
		f, err := conn.(*net.TCPConn).File()
		if err != nil {
			return err
		}
		cmd := exec.Command(args[1], "-inherit")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{f}
		return cmd.Run()
	case len(args) == 3 && args[0] == "-dance":
		return dance(args[1], args[2])
	case len(args) == 1 && args[0] == "-hold":
		f := os.NewFile(3, "inherited")
		defer f.Close()
		fmt.Println("held")
		_, err := io.Copy(io.Discard, os.Stdin)
		return err
	case len(args) == 3 && args[0] == "-exec":
		conn, err := net.Dial("tcp", args[2])
		if err != nil {
			return err
		}
		f, err := conn.(*net.TCPConn).File()
		if err != nil {
			return err
		}
		fmt.Println("connected")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		if fd := int(f.Fd()); fd != 3 {
			if err := syscall.Dup2(fd, 3); err != nil {
				return err
			}
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, 3, syscall.F_SETFD, 0); errno != 0 { // kept across exec
			return errno
		}
		return syscall.Exec(args[1], []string{args[1], "-inherit"}, os.Environ())
	case len(args) >= 2 && args[0] == "-spawn":
		cmd := exec.Command(args[1], args[2:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return cmd.Run()
	case len(args) == 1:
		conn, err := net.Dial("tcp", args[0])
		if err != nil {
			return err
		}
		return hold(conn)
	}
	return fmt.Errorf("usage: caller ADDR | -share CHILD ADDR | -inherit | -spawn EXE ARGS... | -dance CHILD ADDR | -hold | -exec CHILD ADDR")
}

func hold(conn io.ReadWriteCloser) error {
	defer conn.Close()
	if req := os.Getenv("CALLER_REQUEST"); req != "" {
		// A request instead of the ready line: print the answer's first line.
		if _, err := io.WriteString(conn, req); err != nil {
			return err
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		fmt.Printf("got %s\n", strings.TrimRight(line, "\r\n"))
	} else if _, err := fmt.Fprintf(conn, "ready %s\n", name); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}

// dance is the attack on binary identity: the connection is held, when the
// proxy looks, only by CHILD (an executable the policy may allow), while
// our own copy is in flight in a unix socket we hold, to be taken back for
// the response.
func dance(child, addr string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	f, err := conn.(*net.TCPConn).File()
	if err != nil {
		return err
	}
	conn.Close()
	cmd := exec.Command(child, "-hold")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	childIn, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	childOut, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer childIn.Close()
	if line, err := bufio.NewReader(childOut).ReadString('\n'); err != nil || line != "held\n" {
		return fmt.Errorf("child: %q, %v", line, err)
	}
	req := os.Getenv("CALLER_REQUEST")
	if req == "" {
		req = "ready " + name + "\n"
	}
	if _, err := f.WriteString(req); err != nil {
		return err
	}
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := syscall.Sendmsg(pair[0], []byte{0}, syscall.UnixRights(int(f.Fd())), nil, 0); err != nil {
		return err
	}
	f.Close()
	fmt.Println("in flight")
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err != nil {
		return err
	}
	buf, oob := make([]byte, 1), make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := syscall.Recvmsg(pair[1], buf, oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("control messages: %d, %v", len(msgs), err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return fmt.Errorf("rights: %v, %v", fds, err)
	}
	back := os.NewFile(uintptr(fds[0]), "back")
	defer back.Close()
	line, err := bufio.NewReader(back).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	fmt.Printf("got %s\n", strings.TrimRight(line, "\r\n"))
	_, err = io.Copy(io.Discard, stdin)
	return err
}
