//go:build linux

package identity

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
)

var (
	errNotTCP              = errors.New("not a TCP connection")
	errSocketInNamespaces  = errors.New("a socket with the client's addresses is in more than one network namespace")
	errNoNamespaceReadable = errors.New("no network namespace's TCP tables could be read")
)

// OfRedirected is Of for a connection the kernel redirected to the proxy
// (NAT to a transparent listener): the client's socket has the local
// address conn.RemoteAddr (the client as the proxy sees it, loopback or
// not) and the remote address orig, the destination the client dialled;
// and it lives in the client's network namespace, which need not be the
// proxy's (portcullis run's sandbox has one of its own). So its row is
// looked for in the TCP tables of every network namespace a process is in
// (/proc/PID/net/tcp{,6} of one process per namespace, told apart by
// /proc/PID/ns/net); socket inodes are global, so its holders are then
// found as for Of. Addresses found in more than one namespace (two
// namespaces using the same ones) leave the caller unknown.
func OfRedirected(conn net.Conn, orig netip.AddrPort) (Caller, error) {
	s, err := lookRedirected(conn, orig)
	if err != nil {
		return Caller{}, err
	}
	return s.caller(), nil
}

// lookRedirected finds the holders of a redirected connection's client
// socket now.
func lookRedirected(conn net.Conn, orig netip.AddrPort) (sighting, error) {
	remote, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok || remote == nil {
		return sighting{}, fmt.Errorf("caller binary: %w", errNotTCP)
	}
	return lookSocket(unmapAddrPort(remote.AddrPort()), unmapAddrPort(orig), namespacesSocketInode)
}

// namespacesSocketInode is clientSocketInode in every network namespace
// a process is in. A process whose namespace cannot be read (it exited,
// or the proxy may not look into it) is passed over: its namespace is
// looked in through another process, or not at all (the caller is then
// not found).
func namespacesSocketInode(client, remote netip.AddrPort) (inode uint64, uid uint32, err error) {
	proc, err := os.Open(procRoot)
	if err != nil {
		return 0, 0, err
	}
	defer proc.Close()
	seen := map[string]bool{}
	var found procNetTCPRow
	read := 0
	for {
		names, rerr := proc.Readdirnames(256)
		for _, name := range names {
			if pid, err := strconv.Atoi(name); err != nil || pid <= 0 {
				continue // not a process
			}
			dir := procRoot + "/" + name + "/"
			ns, err := os.Readlink(dir + "ns/net")
			if err != nil || seen[ns] {
				continue
			}
			seen[ns] = true
			row, err := tablesRow(dir, client, remote)
			if err != nil {
				continue // exited while we looked
			}
			read++
			switch {
			case row.inode == 0:
			case found.inode != 0 && found.inode != row.inode:
				return 0, 0, fmt.Errorf("%w (%s -> %s)", errSocketInNamespaces, client, remote)
			default:
				found = row
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, rerr
		}
	}
	switch {
	case found.inode != 0:
		return found.inode, found.uid, nil
	case read == 0:
		return 0, 0, errNoNamespaceReadable
	}
	return 0, 0, errSocketNotFound
}
