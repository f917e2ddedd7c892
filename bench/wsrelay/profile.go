package main

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

// freeLoopbackAddr is a 127.0.0.1 address with a port free a moment ago,
// for the proxy's --pprof-listen (procs reads only its listen line).
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startProfile fetches a CPU profile of the proxy over d (whole seconds,
// at least one) from its pprof address into file; the channel receives
// the outcome.
func startProfile(ctx context.Context, pprofAddr string, d time.Duration, file string) <-chan error {
	done := make(chan error, 1)
	secs := max(1, int((d+time.Second-1)/time.Second))
	go func() {
		done <- procs.FetchProfile(ctx, "http://"+pprofAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), file)
	}()
	return done
}
