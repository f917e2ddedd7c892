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

// The relay path is a floor, not a product: the least any proxy written
// in Go's goroutine-per-connection style can cost. It is this program
// again (-relay-child), in a process of its own, relaying bytes between
// each client connection and an upstream connection of its own, one
// goroutine per direction, reading into a buffer and writing it out —
// the same system calls per request as nginx and the proxy (a read and a
// write each way), with no HTTP parsing, judging or logging at all. What
// the proxy costs above the relay is its own work; what the relay costs
// above nginx is the runtime's (goroutines parked and woken through the
// netpoller) and cannot be cut by the proxy's code.

type relayRequest struct {
	Upstream string `json:"upstream"`
}

type relayResponse struct {
	Err  string `json:"err,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// relayProc is the relay running as a child process.
type relayProc struct {
	*childproc.Proc
	addr string
}

// startRelay starts the relay in front of upstream (host:port).
func startRelay(upstream string) (*relayProc, error) {
	p, err := childproc.Start("the relay", []string{"-relay-child"}, nil)
	if err != nil {
		return nil, err
	}
	var res relayResponse
	if err := p.Call("start", relayRequest{Upstream: upstream}, &res); err != nil {
		p.Close()
		return nil, err
	}
	if res.Err != "" {
		p.Close()
		return nil, fmt.Errorf("the relay: %s", res.Err)
	}
	return &relayProc{Proc: p, addr: res.Addr}, nil
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		copyPlain(u, c)
		u.(*net.TCPConn).CloseWrite()
	}()
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
