// Package byterelay is a benchmark's floor, not a product: a byte relay in
// a process of its own (the benchmark's executable started again with
// -relay-child, childproc), copying bytes both ways between each client
// connection and a connection of its own to the upstream, one goroutine
// per direction reading into a buffer and writing it out (the system
// calls a proxy that reads what it relays makes), with no protocol read
// at all. The client dials it as if it were the upstream. What a proxy
// costs above it is the proxy's own work; what it costs above direct is
// the price of any second process on the way.
package byterelay

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

// ChildFlag is the flag that makes the benchmark's executable the relay:
// its main runs Child when given it.
const ChildFlag = "-relay-child"

type request struct {
	Upstream string `json:"upstream"`
}

type response struct {
	Err  string `json:"err,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// Start starts the relay in front of upstream (host:port) and returns it
// with the address it listens on.
func Start(upstream string) (*childproc.Proc, string, error) {
	p, err := childproc.Start("the relay", []string{ChildFlag}, nil)
	if err != nil {
		return nil, "", err
	}
	var res response
	if err := p.Call("start", request{Upstream: upstream}, &res); err != nil {
		p.Close()
		return nil, "", err
	}
	if res.Err != "" {
		p.Close()
		return nil, "", fmt.Errorf("the relay: %s", res.Err)
	}
	return p, res.Addr, nil
}

// Child serves as the relay: it reads one request from in, listens on a
// free loopback port, answers with the address, and relays until in
// closes.
func Child(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return err
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b, _ := json.Marshal(response{Err: err.Error()})
		out.Write(append(b, '\n'))
		return err
	}
	b, _ := json.Marshal(response{Addr: ln.Addr().String()})
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
