package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// The proxy's --pprof-listen: Go's profiling endpoints (net/http/pprof)
// on a listener of their own, so anyone can profile the binary as it runs
// (`go tool pprof http://ADDR/debug/pprof/profile?seconds=30`). Off by
// default, and only ever on a loopback address: a profile shows the
// proxy's memory and the requests in flight, and a CPU profile costs CPU.

// pprofServer serves the profiling endpoints until stop is called.
type pprofServer struct {
	addr net.Addr
	srv  *http.Server
	done sync.WaitGroup
}

// checkPprofAddr refuses an address that is not host:port on a loopback
// host, with a usage error naming the flag.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--pprof-listen %q: %v", addr, err)
	}
	if !loopbackHost(host) {
		return usagef("--pprof-listen %q: must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", addr)
	}
	return nil
}

// startPprof listens on addr (checked by checkPprofAddr) and serves
// /debug/pprof/ there.
func startPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	if err := checkPprofAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("--pprof-listen: listen on %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile under it
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &pprofServer{
		addr: ln.Addr(),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
	}
	s.done.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "err", err)
		}
	})
	return s, nil
}

// url is where the profiles are listed.
func (s *pprofServer) url() string { return fmt.Sprintf("http://%s/debug/pprof/", s.addr) }

// stop ends the server (a profile being taken is cut short) and waits
// for it.
func (s *pprofServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	s.done.Wait()
}
