//go:build unix && (!linux || 386)

package h1

import "syscall"

// peekDontWait peeks at what the socket fd holds without waiting.
func peekDontWait(fd uintptr, b []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
