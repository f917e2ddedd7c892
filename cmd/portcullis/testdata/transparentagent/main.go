// Command transparentagent is the agent of the transparent path's
// end-to-end tests: run under `portcullis run` with no proxy settings,
// it makes one kind of connection and prints what came of it on one
// line, for the test to compare.
//
//	transparentagent get URL [HOST]    plain-socket HTTP GET (Host header HOST if given): the status line
//	transparentagent tls ADDR SNI      a TLS handshake with server name SNI: "handshake ok" or the error
//	transparentagent tcp ADDR MSG      write MSG as a line (CRLF, as Redis and SMTP clients do), read the echo: "echo MSG" or the error
//	transparentagent dns NAME [SERVER] look NAME up (through SERVER if given): the addresses, or "NXDOMAIN"
//	transparentagent udp ADDR          send one datagram: "sent" or the error
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: transparentagent get|tls|tcp|dns|udp ARGS…")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out string
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "get":
		out, err = get(ctx, args[0], arg(args, 1))
	case "tls":
		out, err = handshake(ctx, args[0], arg(args, 1))
	case "tcp":
		out, err = echo(ctx, args[0], arg(args, 1))
	case "dns":
		out, err = lookup(ctx, args[0], arg(args, 1))
	case "udp":
		out, err = datagram(args[0])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func arg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

var dialer net.Dialer

func get(ctx context.Context, raw, host string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if host == "" {
		host = u.Host
	}
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), host)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

func handshake(ctx context.Context, addr, sni string) (string, error) {
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err := tc.HandshakeContext(ctx); err != nil {
		return "", err
	}
	return "handshake ok", nil
}

func echo(ctx context.Context, addr, msg string) (string, error) {
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\r\n"); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg)+2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return "", fmt.Errorf("no echo: %w", err)
	}
	return "echo " + strings.TrimSpace(string(buf)), nil
}

func lookup(ctx context.Context, name, server string) (string, error) {
	r := &net.Resolver{PreferGo: true}
	if server != "" {
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "udp", server)
		}
	}
	addrs, err := r.LookupHost(ctx, name)
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok && dnsErr.IsNotFound {
		return "NXDOMAIN", nil
	}
	if err != nil {
		return "", err
	}
	return strings.Join(addrs, ","), nil
}

func datagram(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("datagram")); err != nil {
		return "", err
	}
	return "sent", nil
}
