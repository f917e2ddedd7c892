//go:build !linux

package dataplane

import "net"

// rawIO returns conn: raw system calls for its reads and writes are made
// on Linux only (rawio_linux.go says why).
func rawIO(conn net.Conn) net.Conn { return conn }
