// Package identity owns naming the process on the client end of a proxied
// connection: its executable and its ancestors' (Caller), found through
// /proc on Linux (socket inode → pid → /proc/PID/exe, then up
// /proc/PID/stat's ppid to the proxy's own lineage), unknown elsewhere.
// Policies match rules that name binaries against it; an unknown caller
// matches none, so identity can only narrow what is allowed.
package identity
