//go:build linux

// Command caller is a test helper for procid_test.go: a real executable that
// connects to the proxy-side listener so CallerBinary can name it.
//
//	caller ADDR               connect, write "ready NAME\n", hold the connection until stdin closes
//	caller -share CHILD ADDR  connect, then run CHILD -inherit with the connection as fd 3
//	                          (both processes hold the socket); wait for it
//	caller -inherit           write "ready NAME\n" to fd 3, hold it until stdin closes
//	caller -spawn EXE ARGS... run EXE ARGS... as a child (its own connection, if any) and wait
//
// With CALLER_NODUMP=1 in the environment, -inherit first makes its process
// non-dumpable (its /proc entries then need CAP_SYS_PTRACE to read), as an
// agent hiding a process from the proxy would.
//
// NAME is set at build time (-ldflags -X main.name=...), so two builds are
// two different executables.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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
	return fmt.Errorf("usage: caller ADDR | -share CHILD ADDR | -inherit | -spawn EXE ARGS...")
}

func hold(conn io.WriteCloser) error {
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "ready %s\n", name); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}
