package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/portcullis-dev/portcullis/bench/internal/childproc"
)

// The relay path is a floor, not a product: what a second process on the
// way costs by itself. It is this program again (-relay-child), in a
// process of its own, copying bytes both ways between each client
// connection and a connection of its own to the upstream, one goroutine
// per direction reading into a buffer and writing it out, with no HTTP
// and no frame read. The client dials it as if it were the upstream. On 2
// cores a hop through another process costs context switches and wake-ups
// whatever that process does; what the proxy costs above the relay is
// its own work (the handshake's judging, reading every client frame,
// masking it afresh).

type relayRequest struct {
	Upstream string `json:"upstream"`
}

type relayResponse struct {
	Err  string `json:"err,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// startRelay starts the relay in front of upstream (host:port) and
// returns it with the address it listens on.
func startRelay(upstream string) (*childproc.Proc, string, error) {
	p, err := childproc.Start("the relay", []string{"-relay-child"}, nil)
	if err != nil {
		return nil, "", err
	}
	var res relayResponse
	if err := p.Call("start", relayRequest{Upstream: upstream}, &res); err != nil {
		p.Close()
		return nil, "", err
	}
	if res.Err != "" {
		p.Close()
		return nil, "", fmt.Errorf("the relay: %s", res.Err)
	}
	return p, res.Addr, nil
}

// relayChild serves as the relay: it reads one request from in, listens
// on a free loopback port, answers with the address, and relays until in
// closes.
func relayChild(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return err
	}
	var req relayRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b, _ := json.Marshal(relayResponse{Err: err.Error()})
		out.Write(append(b, '\n'))
		return err
	}
	b, _ := json.Marshal(relayResponse{Addr: ln.Addr().String()})
	if _, err := out.Write(append(b, '\n')); err != nil {
		return err
	}
	go func() {
		io.Copy(io.Discard, br) // until the parent closes stdin
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go relayConn(c, req.Upstream)
	}
}

// relayConn copies bytes both ways between c and a new connection to
// upstream until either side closes.
func relayConn(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		copyPlain(u, c)
		u.(*net.TCPConn).CloseWrite()
	})
	copyPlain(c, u)
	c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}

// copyPlain copies src to dst through a buffer, as a proxy that reads
// what it relays must: not io.Copy, which would splice(2) between the two
// sockets inside the kernel.
func copyPlain(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
