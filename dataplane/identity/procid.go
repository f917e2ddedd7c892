//go:build linux

package identity

// Binary identity: which executable is on the other end of a loopback
// connection.
//
// Deployment assumption (DESIGN.md): the proxy runs on the same host, in the
// same network and PID namespaces as the agent (a sidecar), with a /proc that
// shows the agent's processes (no hidepid), and able to read the agent's
// /proc/PID/fd, fdinfo and exe. Listing another user's fd directory takes
// root (or CAP_DAC_READ_SEARCH); reading the links takes the kernel's ptrace
// "read" check, which for another user, or for a process that made itself
// non-dumpable, takes CAP_SYS_PTRACE. So: root with CAP_SYS_PTRACE (container
// runtimes drop it by default; add it to the proxy's container). A proxy
// running as the agent's own uid names callers too, until the agent hides a
// process (PR_SET_DUMPABLE 0); then, by the rule in socketHolders, callers
// are unknown. Where any of this fails the caller is unknown and rules that
// name binaries do not match: identity can only narrow what is allowed,
// never widen it.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

var (
	errNotLoopback    = errors.New("not a TCP connection over loopback")
	errSocketNotFound = errors.New("client socket not found")
	errCallerIsProxy  = errors.New("client end is held by the proxy's own process")
	errCallerAmbig    = errors.New("client socket shared by processes with different executables")
	errExeReplaced    = errors.New("executable was deleted or replaced after the process started")
	errSocketInFlight = errors.New("descriptors are in flight in a unix socket of the socket's user: the socket may be one, its holder unseen")
	errNoInflightInfo = errors.New("the kernel does not show descriptors in flight (scm_fds in /proc/PID/fdinfo, Linux 5.3 and later)")
	// A redirected connection's (redirected.go).
	errNotTCP              = errors.New("not a TCP connection")
	errSocketInNamespaces  = errors.New("a socket with the client's addresses is in more than one network namespace")
	errNoNamespaceReadable = errors.New("no network namespace's TCP tables could be read")
)

// procRoot is where procfs is mounted.
const procRoot = "/proc"

// Binary returns the absolute path of the executable of the process
// that owns the client end of conn, when conn is a TCP connection over
// loopback on this host (the proxy's side is conn.LocalAddr, the client's is
// conn.RemoteAddr). It is Of without the ancestors.
func Binary(conn net.Conn) (string, error) {
	c, err := Of(conn)
	return c.Binary, err
}

// Of returns the executable of the process that owns the client
// end of conn, and its ancestors' executables, as one look at /proc shows
// them now (Follow and Watch.Caller look twice: at accept and when a
// request is judged). It finds the socket inode in /proc/net/tcp and
// /proc/net/tcp6 (the row whose local address is the client's address and
// remote is ours), then the pids whose /proc/PID/fd/* link to
// socket:[INODE], then /proc/PID/exe; then it walks up the parents (see
// ancestorExes). Any failure (not loopback, not found, permission denied,
// the process exited, several holders with different executables, or
// descriptors in flight that may be the socket: socketHolders) returns an
// empty Caller and err: a rule that names binaries then does not match.
//
// The path is the kernel's: symlinks resolved, as seen from the caller's
// mount namespace. An executable deleted or replaced since the process
// started is unknown (the binary changed under its name). A client end held
// by the proxy's own process is an error too, not the proxy's executable:
// otherwise a request the proxy makes to itself (a loop through a loopback
// upstream) would carry the proxy's identity instead of the agent's.
//
// Cost: one read of the TCP tables and one pass over every process's fd
// directory (O(open files on the host)), plus the fdinfo of the sockets of
// processes of the socket's uid and a few reads per ancestor, once per
// call; nothing is cached, since pids and inodes are reused.
func Of(conn net.Conn) (Caller, error) {
	s, err := look(conn)
	if err != nil {
		return Caller{}, err
	}
	return s.caller(), nil
}

// sighting is one look at the holders of a connection's client socket.
type sighting struct {
	client  netip.AddrPort
	inode   uint64
	exe     string   // what every holder runs
	holders []holder // in pid order
}

// look finds the holders of conn's client socket now.
func look(conn net.Conn) (sighting, error) {
	client, proxy, err := loopbackPeers(conn)
	if err != nil {
		return sighting{}, fmt.Errorf("caller binary: %w", err)
	}
	return lookSocket(client, proxy, clientSocketInode)
}

// lookSocket finds the holders of the client socket whose local address
// is client and remote is remote, found by find (in which /proc/net/tcp
// tables it looks).
func lookSocket(client, remote netip.AddrPort, find func(client, remote netip.AddrPort) (uint64, uint32, error)) (sighting, error) {
	if err := inflightShown(); err != nil {
		return sighting{}, fmt.Errorf("caller binary of %s: %w", client, err)
	}
	inode, uid, err := find(client, remote)
	if err != nil {
		return sighting{}, fmt.Errorf("caller binary of %s: %w", client, err)
	}
	exe, holders, err := socketHolders(inode, uid)
	if err != nil {
		return sighting{}, fmt.Errorf("caller binary of %s (socket:[%d]): %w", client, inode, err)
	}
	slices.SortFunc(holders, func(a, b holder) int { return a.pid - b.pid })
	return sighting{client: client, inode: inode, exe: exe, holders: holders}, nil
}

// caller is the Caller the sighting names, its ancestors read now.
func (s sighting) caller() Caller {
	return Caller{Binary: s.exe, Ancestors: holdersAncestors(s.holders, socketLink(s.inode))}
}

// same reports whether the same processes (pid, start time, executable)
// held the same socket in both sightings.
func (s sighting) same(o sighting) bool {
	return s.inode == o.inode && slices.EqualFunc(s.holders, o.holders, func(a, b holder) bool {
		return a.pid == b.pid && a.start == b.start && a.exe == b.exe
	})
}

// errorf wraps err with the sighting's client and socket.
func (s sighting) errorf(err error) error {
	return fmt.Errorf("caller binary of %s (socket:[%d]): %w", s.client, s.inode, err)
}

func socketLink(inode uint64) string { return "socket:[" + strconv.FormatUint(inode, 10) + "]" }

// maxAncestors bounds the walk up the process tree (OpenShell's limit).
const maxAncestors = 64

// holder is a process holding the client socket, and one of its fds that
// links to it.
type holder struct {
	pid   int
	start uint64 // its start time (/proc/PID/stat): a reused pid has another
	exe   string
	fd    string
}

// holdersAncestors returns the ancestors common to every holder of the
// socket (a socket shared across fork may have holders with different
// parents; only what they all share vouches for the connection), in the
// first holder's order. A holder that no longer holds the socket after
// the walk (it exited, and its pid may name another process now) leaves
// the caller with no ancestors.
func holdersAncestors(holders []holder, target string) []string {
	stop := proxyLineage()
	var common []string
	for i, h := range holders {
		chain := ancestorExes(h.pid, stop)
		if l, err := os.Readlink(procRoot + "/" + strconv.Itoa(h.pid) + "/fd/" + h.fd); err != nil || l != target {
			return nil
		}
		if i == 0 {
			common = chain
			continue
		}
		common = slices.DeleteFunc(common, func(exe string) bool { return !slices.Contains(chain, exe) })
	}
	return common
}

// ancestorExes returns the executables of pid's parent, grandparent and so
// on, parent first, as OpenShell's exec.ancestors: at most maxAncestors,
// stopping before PID 1 and before the first process in stop (the proxy
// and its own ancestors: a process both share — PID 1 in a shared PID
// namespace, a shell that started both — says nothing about who the caller
// is; nor does the proxy, should it have started the caller). OpenShell
// stops at the sandbox's entrypoint process, which it knows and includes;
// a sidecar proxy knows no entrypoint, so its own lineage is the boundary. An ancestor whose
// executable cannot be read, was deleted or replaced, is skipped (it can
// only match less). The walk ends where a parent cannot be read, or where
// the child's parent changed while its executable was read (the parent
// exited and the child was reparented: its pid may name another process
// now).
func ancestorExes(pid int, stop map[int]bool) []string {
	var out []string
	cur := pid
	for range maxAncestors {
		ppid, err := parentPID(cur)
		if err != nil || ppid <= 1 || ppid == cur || stop[ppid] {
			break
		}
		exe, err := os.Readlink(procRoot + "/" + strconv.Itoa(ppid) + "/exe")
		if again, err := parentPID(cur); err != nil || again != ppid {
			break
		}
		if err == nil && strings.HasPrefix(exe, "/") && !strings.HasSuffix(exe, " (deleted)") {
			out = append(out, exe)
		}
		cur = ppid
	}
	return out
}

// proxyLineage is the set of this process's pid and its ancestors' pids.
func proxyLineage() map[int]bool {
	out := map[int]bool{}
	for pid := os.Getpid(); pid > 0 && !out[pid] && len(out) <= 4*maxAncestors; {
		out[pid] = true
		ppid, err := parentPID(pid)
		if err != nil {
			break
		}
		pid = ppid
	}
	return out
}

// parentPID reads the parent pid from /proc/PID/stat: "PID (COMM) STATE
// PPID …", where COMM may hold spaces and parentheses (so the fields are
// counted from the last ')').
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatPPID(string(b))
}

func parseStatPPID(stat string) (int, error) {
	f, err := statField(stat, 4, "ppid")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f)
}

// parseStatStart returns the start time (field 22: clock ticks after
// boot) from /proc/PID/stat's text.
func parseStatStart(stat string) (uint64, error) {
	f, err := statField(stat, 22, "start time")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f, 10, 64)
}

// statField returns field n (numbered from 1, as proc(5) numbers them;
// 3, the state, is the first after COMM) of /proc/PID/stat's text; what
// names it in the error when the text is too short.
func statField(stat string, n int, what string) (string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", errors.New("malformed stat: no comm")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < n-2 {
		return "", errors.New("malformed stat: no " + what)
	}
	return f[n-3], nil
}

// loopbackPeers returns the client's and the proxy's address of a TCP
// connection whose both ends are loopback, IPv4-mapped addresses unmapped.
func loopbackPeers(conn net.Conn) (client, proxy netip.AddrPort, err error) {
	remote, ok1 := conn.RemoteAddr().(*net.TCPAddr)
	local, ok2 := conn.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || remote == nil || local == nil {
		return client, proxy, errNotLoopback
	}
	client = unmapAddrPort(remote.AddrPort())
	proxy = unmapAddrPort(local.AddrPort())
	if !client.Addr().IsLoopback() || !proxy.Addr().IsLoopback() {
		return client, proxy, fmt.Errorf("%w (%s -> %s)", errNotLoopback, client, proxy)
	}
	return client, proxy, nil
}

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// clientSocketInode finds the inode and owner uid of the socket whose local
// address is client and remote address is proxy, in /proc/net/tcp then
// /proc/net/tcp6 (an IPv6 socket talking IPv4 appears in tcp6 with
// IPv4-mapped addresses).
func clientSocketInode(client, proxy netip.AddrPort) (inode uint64, uid uint32, err error) {
	row, err := tablesRow(procRoot+"/", client, proxy)
	if err != nil || row.inode != 0 {
		return row.inode, row.uid, err
	}
	return 0, 0, errSocketNotFound
}

// tablesRow scans dir's net/tcp then net/tcp6 (dir is /proc/ or
// /proc/PID/: the tables of that process's network namespace) for the
// row local=client, remote=remote; inode 0 when there is none.
func tablesRow(dir string, client, remote netip.AddrPort) (procNetTCPRow, error) {
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(dir + name)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return procNetTCPRow{}, err
		}
		row, err := findSocketRow(f, client, remote)
		f.Close()
		if err != nil || row.inode != 0 {
			return row, err
		}
	}
	return procNetTCPRow{}, nil
}

// findSocketRow scans one /proc/net/tcp{,6} table for the row local=client,
// remote=proxy with a live inode; inode 0 when there is none. TCP keeps
// 4-tuples unique among sockets that have an inode (TIME_WAIT rows show
// inode 0).
func findSocketRow(r io.Reader, client, proxy netip.AddrPort) (procNetTCPRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), 4096)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		row, err := parseProcNetTCPLine(sc.Text())
		if err != nil {
			return procNetTCPRow{}, fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		if row.inode != 0 && row.local == client && row.remote == proxy {
			return row, nil
		}
	}
	return procNetTCPRow{}, sc.Err()
}

type procNetTCPRow struct {
	local, remote netip.AddrPort // unmapped
	uid           uint32         // who created the socket
	inode         uint64
}

// parseProcNetTCPLine parses one data row of /proc/net/tcp or /proc/net/tcp6:
//
//	sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
//	0: 0100007F:1F90 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000 1000 0 123456 ...
func parseProcNetTCPLine(line string) (procNetTCPRow, error) {
	var row procNetTCPRow
	f := strings.Fields(line)
	if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
		return row, errors.New("too few fields")
	}
	var err error
	if row.local, err = parseProcNetAddr(f[1]); err != nil {
		return row, fmt.Errorf("local address: %w", err)
	}
	if row.remote, err = parseProcNetAddr(f[2]); err != nil {
		return row, fmt.Errorf("remote address: %w", err)
	}
	uid, err := strconv.ParseUint(f[7], 10, 32)
	if err != nil {
		return row, fmt.Errorf("uid: %w", err)
	}
	row.uid = uint32(uid)
	if row.inode, err = strconv.ParseUint(f[9], 10, 64); err != nil {
		return row, fmt.Errorf("inode: %w", err)
	}
	return row, nil
}

// parseProcNetAddr parses ADDR:PORT as the kernel prints it: the address as
// 32-bit words in host byte order (%08X each: one word for IPv4, four for
// IPv6), the port as a plain 16-bit number (%04X). IPv4-mapped IPv6
// addresses are unmapped.
func parseProcNetAddr(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok || len(hexPort) != 4 || (len(hexAddr) != 8 && len(hexAddr) != 32) {
		return netip.AddrPort{}, fmt.Errorf("malformed address %q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("malformed port %q", hexPort)
	}
	var b [16]byte
	for i := 0; i < len(hexAddr)/8; i++ {
		w, err := strconv.ParseUint(hexAddr[i*8:i*8+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("malformed address %q", hexAddr)
		}
		binary.NativeEndian.PutUint32(b[i*4:], uint32(w))
	}
	var addr netip.Addr
	if len(hexAddr) == 8 {
		addr = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		addr = netip.AddrFrom16(b).Unmap()
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// socketHolders returns the executable of the process(es) holding
// socket:[inode], created by uid, and the holders. Several holders (a
// socket inherited across fork or passed over a unix socket) must all run
// the same executable.
//
// A process whose fds we may not read could hold the socket too, and then
// the executable we did find would vouch for its requests. Such a process is
// ignored when none of its uids is the socket's uid (a system daemon, not
// the agent); otherwise the caller is unknown. That covers an agent hiding a
// process of its own (PR_SET_DUMPABLE 0) from a proxy without CAP_SYS_PTRACE.
//
// A socket can also be held by no process at all: in flight, sent over a
// unix socket (SCM_RIGHTS) and not yet received. The process that wrote
// the request can keep its copy there while the proxy looks, so that only
// another holder (a child it let inherit the socket, running an executable
// a rule allows) shows, and take it back for the answer. The kernel does
// not say which descriptors are in flight, only how many wait in each unix
// socket (scm_fds in /proc/PID/fdinfo). So while any unix socket held by a
// process of the socket's uid has descriptors waiting, the caller is
// unknown (errSocketInFlight). Other users' processes are not looked at: a
// socket sent to one is not the agent's to take back.
func socketHolders(inode uint64, uid uint32) (string, []holder, error) {
	target := socketLink(inode)
	self := os.Getpid()

	var (
		buf        = new(scanBuf)
		exe        string
		holders    []holder
		denied     int // processes we could not look into
		suspicious int // ... of them, those running as the socket's uid
		stop       error
	)
	err := eachProcess(func(pid int) bool {
		h, held, sockets, herr := lookIntoProcess(buf, pid, target)
		switch {
		case errors.Is(herr, os.ErrPermission):
			denied++
			if processHasUID(pid, uid) {
				suspicious++
			}
			return true
		case pid == self:
			if held {
				stop = errCallerIsProxy
			}
			return !held
		case len(sockets) > 0 && processHasUID(pid, uid):
			if stop = noneInFlight(pid, sockets); stop != nil {
				return false
			}
		}
		switch {
		case !held:
			return true // not a holder, or exited while we looked
		case herr != nil:
			stop = fmt.Errorf("pid %d: %w", pid, herr)
		case exe != "" && exe != h.exe:
			stop = fmt.Errorf("%w (%s, %s)", errCallerAmbig, exe, h.exe)
		default:
			holders = append(holders, h)
			exe = h.exe
			return true
		}
		return false
	})
	if err == nil {
		err = stop
	}
	if err != nil {
		return "", nil, err
	}
	if suspicious > 0 || (len(holders) == 0 && denied > 0) {
		return "", nil, fmt.Errorf("the fds of %d processes (%d of uid %d, the socket's) are not readable (%w): the proxy needs root with CAP_SYS_PTRACE",
			denied, suspicious, uid, os.ErrPermission)
	}
	if len(holders) == 0 {
		return "", nil, fmt.Errorf("%w (its process exited or is in another PID namespace)", errSocketNotFound)
	}
	return exe, holders, nil
}

// eachProcess calls f with the pid of every process in /proc until f
// returns false.
func eachProcess(f func(pid int) bool) error {
	proc, err := os.Open(procRoot)
	if err != nil {
		return err
	}
	defer proc.Close()
	for {
		names, err := proc.Readdirnames(256)
		for _, name := range names {
			// Other names are not processes ("self", "net", ...).
			if pid, perr := strconv.Atoi(name); perr == nil && pid > 0 && !f(pid) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// noneInFlight returns errSocketInFlight when a unix socket among pid's
// fds (sockets: fd names linking to sockets) has descriptors waiting in
// it. An fd closed meanwhile has none.
func noneInFlight(pid int, sockets []string) error {
	dir := procRoot + "/" + strconv.Itoa(pid) + "/fdinfo/"
	for _, fd := range sockets {
		b, err := os.ReadFile(dir + fd)
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("pid %d fd %s: %w", pid, fd, err)
		}
		if err != nil {
			continue // closed, or the process exited
		}
		if n, ok := scmFDs(string(b)); ok && n > 0 {
			return fmt.Errorf("%w (pid %d fd %s: %d)", errSocketInFlight, pid, fd, n)
		}
	}
	return nil
}

// scmFDs returns the count of descriptors waiting in a unix socket, from
// its fdinfo text ("scm_fds: N"); ok false when the fd is no unix socket.
// An unreadable count is a large one.
func scmFDs(fdinfo string) (n uint64, ok bool) {
	for line := range strings.Lines(fdinfo) {
		if rest, found := strings.CutPrefix(line, "scm_fds:"); found {
			n, err := strconv.ParseUint(strings.TrimSpace(rest), 10, 64)
			if err != nil {
				return 1, true
			}
			return n, true
		}
	}
	return 0, false
}

// inflightShown reports whether this kernel shows the descriptors in
// flight in a unix socket (scm_fds in fdinfo, Linux 5.3 and later): without
// that no caller can be named (socketHolders). Checked once, on a socket
// pair of our own.
var inflightShown = sync.OnceValue(func() error {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("unix socket pair: %w", err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	b, err := os.ReadFile(procRoot + "/self/fdinfo/" + strconv.Itoa(pair[0]))
	if err != nil {
		return err
	}
	if _, ok := scmFDs(string(b)); !ok {
		return errNoInflightInfo
	}
	return nil
})

// processHasUID reports whether one of pid's real, effective, saved or
// filesystem uids is uid, from /proc/PID/status (readable by anyone). When
// that cannot be read (the process exited), it reports true unless the
// process is gone, erring on the side of "unknown caller".
func processHasUID(pid int, uid uint32) bool {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if u, err := strconv.ParseUint(f, 10, 32); err != nil || uint32(u) == uid {
				return true
			}
		}
		return false
	}
	return true
}

// lookIntoProcess reports whether pid has an fd linking to target and, if
// so, the process as a holder (its start time and executable); and the
// names of its other fds that link to sockets. It only reads links (never
// follows them), so nothing outside /proc is touched. The fd is looked at
// again after the executable is read: if the pid was reused in between, the
// new process does not hold the socket and the answer is "not held".
//
// It reads the fd directory with raw system calls, reusing buf's memory:
// it runs for every process on every look.
func lookIntoProcess(buf *scanBuf, pid int, target string) (h holder, held bool, sockets []string, err error) {
	dir := procRoot + "/" + strconv.Itoa(pid)
	fdDir := dir + "/fd"
	dfd, err := syscall.Open(fdDir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return h, false, nil, &os.PathError{Op: "open", Path: fdDir, Err: err}
	}
	defer syscall.Close(dfd)
	h.pid = pid
	buf.names = buf.names[:0]
	for {
		n, err := syscall.ReadDirent(dfd, buf.dirents[:])
		if err != nil {
			return h, false, nil, &os.PathError{Op: "getdents", Path: fdDir, Err: err}
		}
		if n <= 0 {
			break
		}
		_, _, buf.names = syscall.ParseDirent(buf.dirents[:n], -1, buf.names)
	}
	for _, name := range buf.names {
		l, err := readlinkat(dfd, name, buf.link[:])
		if errors.Is(err, os.ErrPermission) {
			return h, false, nil, &os.PathError{Op: "readlink", Path: fdDir + "/" + name, Err: err} // the ptrace read check failed
		}
		switch {
		case err != nil:
		case string(l) == target:
			if h.fd == "" {
				h.fd = name
			}
		case bytes.HasPrefix(l, socketPrefix):
			sockets = append(sockets, name)
		}
	}
	if h.fd == "" {
		return h, false, sockets, nil
	}
	stat, serr := os.ReadFile(dir + "/stat")
	h.exe, err = os.Readlink(dir + "/exe")
	if l, lerr := readlinkat(dfd, h.fd, buf.link[:]); lerr != nil || string(l) != target {
		return h, false, sockets, nil // gone, or the pid now names another process
	}
	if serr == nil {
		h.start, serr = parseStatStart(string(stat))
	}
	switch {
	case serr != nil:
		return h, true, sockets, fmt.Errorf("start time: %w", serr)
	case err != nil:
		return h, true, sockets, err
	case strings.HasSuffix(h.exe, " (deleted)"):
		return h, true, sockets, fmt.Errorf("%w: %s", errExeReplaced, h.exe)
	case !strings.HasPrefix(h.exe, "/"):
		return h, true, sockets, fmt.Errorf("executable path %q is not absolute", h.exe)
	}
	return h, true, sockets, nil
}

var socketPrefix = []byte("socket:[")

// scanBuf is the memory one look reuses from process to process.
type scanBuf struct {
	dirents [8192]byte
	names   []string
	link    [64]byte // "socket:[N]" fits; a longer link is cut, and matches nothing
}

// readlinkat reads the link name in the directory dirfd into buf,
// returning the part of buf filled (cut at len(buf)).
func readlinkat(dirfd int, name string, buf []byte) ([]byte, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return nil, err
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if errno != 0 {
		return nil, errno
	}
	return buf[:n], nil
}
