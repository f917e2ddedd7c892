//go:build linux

package identity

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
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
	seen := map[string]bool{}
	var (
		found procNetTCPRow
		read  int
		stop  error
	)
	err = eachProcess(func(pid int) bool {
		dir := procRoot + "/" + strconv.Itoa(pid) + "/"
		ns, lerr := os.Readlink(dir + "ns/net")
		if lerr != nil || seen[ns] {
			return true
		}
		seen[ns] = true
		row, terr := tablesRow(dir, client, remote)
		switch {
		case terr != nil: // exited while we looked
		case row.inode == 0:
			read++
		case found.inode != 0 && found.inode != row.inode:
			stop = fmt.Errorf("%w (%s -> %s)", errSocketInNamespaces, client, remote)
			return false
		default:
			read++
			found = row
		}
		return true
	})
	if err == nil {
		err = stop
	}
	if err != nil {
		return 0, 0, err
	}
	switch {
	case found.inode != 0:
		return found.inode, found.uid, nil
	case read == 0:
		return 0, 0, errNoNamespaceReadable
	}
	return 0, 0, errSocketNotFound
}
