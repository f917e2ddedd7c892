// Package pprofserve serves Go's profiling endpoints (net/http/pprof) on
// a listener of their own, so anyone can profile a process as it runs
// (`go tool pprof http://ADDR/debug/pprof/profile?seconds=30`); the
// proxy's --pprof-listen. Only ever on a loopback address: a profile
// shows the process's memory and the requests in flight, and a CPU
// profile costs CPU.
package pprofserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync"
	"time"
)

// Server serves the profiling endpoints until Stop is called.
type Server struct {
	addr net.Addr
	srv  *http.Server
	done sync.WaitGroup
}

// CheckAddr refuses an address that is not host:port on a loopback host;
// its message starts with the address, quoted.
func CheckAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", addr, err)
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q: must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", addr)
	}
	return nil
}

// Start listens on addr (CheckAddr's error if it is not loopback) and
// serves /debug/pprof/ there, saying so in log, which gets the server's
// errors too. No address ("") serves nothing: a nil Server, whose Stop
// does nothing.
func Start(addr string, log *slog.Logger) (*Server, error) {
	if addr == "" {
		return nil, nil
	}
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile under it
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{
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
	log.Warn("serving profiles of this process", "url", s.URL())
	return s, nil
}

// URL is where the profiles are listed.
func (s *Server) URL() string { return fmt.Sprintf("http://%s/debug/pprof/", s.addr) }

// Stop ends the server (a profile being taken is cut short) and waits
// for it.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	s.done.Wait()
}
