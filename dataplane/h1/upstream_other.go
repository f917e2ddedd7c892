//go:build !unix

package h1

import "net"

// openCheck cannot peek here: a connection the server closed is found
// when it is used.
type openCheck struct{}

func newOpenCheck(net.Conn) *openCheck { return &openCheck{} }

func (*openCheck) check() bool { return true }

// stillOpen is a one-off check of a connection.
func stillOpen(net.Conn) bool { return true }
