package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Server serves one port with two servers behind the router: net/http
// (Handler) for everything, and GRPC for the connections Route picks.
type Server struct {
	// Handler serves every connection the router gives net/http.
	Handler http.Handler
	// GRPC serves the connections Route picks (see GRPCRoute).
	GRPC  *grpc.Server
	Route func(path, contentType string) bool
	// TLS, when set, is terminated by the router on every connection.
	TLS *tls.Config
	// Routed, if set, counts the connections handed to each server
	// ("grpc", "http").
	Routed func(server string)
	// Metrics and MetricsListener, when both set, serve metrics on a
	// listener of their own, shut down with the rest.
	Metrics         http.Handler
	MetricsListener net.Listener
	// Draining is called when shutdown begins, before the servers'
	// graceful shutdown: long-lived streams are asked to end then.
	Draining func()
	// ShutdownTimeout bounds graceful shutdown.
	ShutdownTimeout time.Duration
	Log             *slog.Logger
}

// Serve serves on ln until ctx ends, then shuts down gracefully, and
// returns once every server and the router have stopped.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:   s.Handler,
		Protocols: protocols,
		HTTP2: &http.HTTP2Config{
			// A peer that stops reading (a stuck proxy) cannot hold a
			// stream's sender forever, and a silent connection is probed.
			WriteByteTimeout: 30 * time.Second,
			SendPingTimeout:  30 * time.Second,
			PingTimeout:      15 * time.Second,
		},
		ReadHeaderTimeout: 10 * time.Second,
		// Long-lived RPC streams keep their connection active; idle
		// keep-alive connections go after two minutes.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	servers := []*http.Server{srv}
	errc := make(chan error, 4)
	// Policy streams get a grpc-go server of their own on the same port
	// (router.go); the router terminates TLS when the gateway serves it.
	rt := newRouter(ln, s.Log, s.Route)
	rt.tlsConfig = s.TLS
	rt.routed = s.Routed
	gs := s.GRPC
	// Every server's goroutine ends with its shutdown below; Serve waits
	// for them all (errc has room for each one's error).
	var running sync.WaitGroup
	defer running.Wait()
	gsc := make(chan struct{}) // closed when gs.Serve returned
	running.Go(func() {
		if err := rt.serve(); err != nil {
			errc <- fmt.Errorf("accept: %w", err)
		}
	})
	running.Go(func() { errc <- srv.Serve(rt.http) })
	running.Go(func() {
		defer close(gsc)
		if err := gs.Serve(rt.grpc); err != nil {
			errc <- err
		}
	})
	if s.MetricsListener != nil {
		msrv := &http.Server{Handler: s.Metrics, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, msrv)
		running.Go(func() { errc <- msrv.Serve(s.MetricsListener) })
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.Log.Info("shutting down", "grace", s.ShutdownTimeout)
	// No new connections; those still being routed are closed.
	rt.close()
	if s.Draining != nil {
		s.Draining()
	}
	// Shut down with a fresh context: ctx is already done.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
	defer cancel()
	grpcStopped := make(chan struct{})
	running.Go(func() {
		defer close(grpcStopped)
		graceful := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-shutdownCtx.Done():
			s.Log.Warn("graceful shutdown of the policy streams timed out; closing their connections")
			gs.Stop()
			<-graceful
		}
	})
	for _, hs := range servers {
		if serr := hs.Shutdown(shutdownCtx); serr != nil {
			// Past the grace period, close what is left: requests still
			// running lose their connection, nothing committed is lost.
			s.Log.Warn("graceful shutdown timed out; closing remaining connections", "err", serr)
			hs.Close()
		}
	}
	<-grpcStopped
	<-gsc
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
