package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
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
		done <- fetchProfile(ctx, "http://"+pprofAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), file)
	}()
	return done
}

// fetchProfile gets a profile from the proxy's pprof endpoint into file.
func fetchProfile(ctx context.Context, profileURL, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, profileURL, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("profile %s: %s: %s", profileURL, res.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile: %w", err)
	}
	return f.Close()
}
