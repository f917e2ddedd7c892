//go:build !linux || 386

package h1

import "net"

// RawIO returns conn: raw system calls for its reads and writes are made
// on Linux only, and not on 386, whose socket calls go through socketcall
// (rawio_linux.go says why they are made so).
func RawIO(conn net.Conn) net.Conn { return conn }
