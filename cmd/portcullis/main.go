// Command portcullis is the one Portcullis binary: the gateway, the proxy,
// and the client commands that talk to a gateway's API.
//
// main only wires: run parses flags and env into an environment, builds the
// command tree and executes it; every outcome becomes one of the exit codes
// of the command-line contract (see exitCode).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"connectrpc.com/connect/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the whole program: tests call it in-process with their own
// arguments, streams and environment, exactly as main does.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	env := newEnvironment(stdin, stdout, stderr, getenv)
	defer env.close()
	root := newRootCmd(env)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return env.exit
	}
	if !env.started {
		// cobra refused the command line before any of our code ran:
		// an unknown command or flag, a missing argument.
		err = asUsage(err)
	}
	if cmd != nil {
		env.commandPath = cmd.CommandPath()
	}
	if ng := env.notGateway(); ng != nil && isA[*connect.Error](err) {
		// The call's own error ("404 Not Found", "invalid content-type")
		// would hide that the address is wrong.
		err = ng
	}
	reportError(env, err)
	return exitCode(err)
}
