// Package boundary makes a sandbox's only way out the proxy, enforced by
// the kernel rather than by proxy settings an agent may ignore.
//
// # portcullis run: a namespace whose only way out is the proxy
//
// Run starts a command in a new network namespace of its own (same mount
// and PID namespaces) joined to the host by a veth pair: the host side is
// pcr<id> (id: run's pid, then a counter for further runs in one process),
// the namespace side eth0, with a /30 from Config.Range (default
// 100.127.0.0/16) that no host address or route uses, and a default route
// via the host side. Loopback in the namespace is the namespace's own and
// IPv6 is disabled there.
//
// The rules live in two nftables tables:
//
//   - in the namespace, an output filter: loopback accepted; TCP and UDP
//     to port 53 accepted (they leave by eth0); everything else (other UDP,
//     ICMP, IPv6) dropped. DNS aimed at a loopback stub (resolv.conf's
//     127.0.0.53) is DNATed to the host side's address and masqueraded, so
//     names resolve whatever the host's resolv.conf says.
//   - on the host, portcullis_run_<id>: TCP arriving from pcr<id> is
//     DNATed to the proxy's transparent listener, UDP to port 53 to the
//     same address's resolver; from pcr<id> the host accepts only what was
//     DNATed (the namespace reaches none of the host's other services) and
//     forwards nothing.
//
// The DNAT is on the host side, not in the namespace, because the proxy
// runs in the host's namespace: it learns a connection's original
// destination with getsockopt(SO_ORIGINAL_DST), which reads the conntrack
// entry of the namespace the socket lives in. A redirect inside the
// sandbox's namespace would leave that entry where the proxy cannot see
// it. When the proxy listens on loopback, route_localnet on pcr<id> lets
// the host DNAT to 127.0.0.1.
//
// # Leaving nothing behind
//
// The command runs with Pdeathsig SIGKILL, from a thread that lives until
// it exits, so it never outlives run. When it exits (or run is signalled:
// SIGINT, SIGTERM and SIGHUP are forwarded to it first), whatever else
// still runs in the namespace is killed, the link and the table deleted.
// If run itself is killed, the command dies with it, the namespace with its
// last process (it is never bind-mounted) and the veth pair with the
// namespace; the host's table stays, inert (its link is gone), until
// RemoveStale, which every Run calls first, deletes any portcullis_run_<id>
// table and pcr<id> link whose run process is gone, and kills what still
// runs in such a link's namespace (a process the command started, which
// Pdeathsig does not reach, keeps the namespace alive).
//
// # Runtimes that make their own namespace
//
// Rules prints, as input for nft -f, the rules for a namespace a container
// runtime made with the proxy as a sidecar in it (a Kubernetes pod, compose's
// network_mode: service:proxy): every process but the proxy's user has its
// TCP redirected to the proxy and its DNS to the proxy's resolver, and
// nothing else out; the proxy goes out directly. There the proxy shares the
// namespace, so a redirect there gives it the original destination.
//
// Run needs Linux and root or CAP_NET_ADMIN (with CAP_SYS_ADMIN to create
// the namespace); it says so plainly otherwise (ErrPrivileges).
package boundary
