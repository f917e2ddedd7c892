// Package identity owns naming the process on the client end of a proxied
// connection: its executable and its ancestors' (Caller), found through
// /proc on Linux (socket inode → pid → /proc/PID/exe, then up
// /proc/PID/stat's ppid to the proxy's own lineage), unknown elsewhere.
// Policies match rules that name binaries against it; an unknown caller
// matches none, so identity can only narrow what is allowed. The proxy
// looks twice (Watch): at accept and when the first request is judged
// (once, when that request had arrived before the look at accept), and
// names a caller only if the same processes held the socket both times and
// no descriptor was in flight among the socket user's unix sockets (the
// socket's own copy could be one).
//
// A connection to the proxy's listener is over loopback, its client socket
// in the proxy's network namespace (Of, Follow). A connection the kernel
// redirected to a transparent listener comes from the client's namespace
// (a sandbox's), its client socket addressed to the original destination:
// it is looked for in every network namespace (OfRedirected,
// FollowRedirected; redirected.go).
package identity
