// Package h1 is the proxy's HTTP/1.x engine: the server its clients talk
// to, and the client it talks to upstreams with. It knows nothing of
// policies: the proxy's judging plugs into it as an http.Handler
// (Config.Handler), with what it alone can say through Config
// (ConnContext: its view of a connection's client; SameAuthority: whether
// two authorities are one destination), and sends what it allowed through
// a Pool (RoundTrip), as net/http's Handler and RoundTripper divide the
// work. It does what net/http would, but within the cost per request of a
// proxy that runs at nginx's speed: no allocation and no system call that
// a request does not need.
//
//   - server.go and response.go: Server, for the listener's connections
//     (Serve; Accept, its accept loop, serves the proxy's transparent
//     listener too) and intercepted tunnels' (ServeConn), each request
//     read with the strict reader and answered with a response writer
//     that also flushes, hijacks and sets deadlines
//     (http.ResponseController). hijacked.go: Hijacked, the connections
//     taken from it, closed together when the proxy stops.
//   - request.go: the strict request reader. One reading of each request
//     decides both what is judged and where the next request starts. What
//     Go's server refuses is refused the same way (FuzzRequestReader
//     compares the two readers); what Go would quietly normalise or accept
//     (Content-Length with Transfer-Encoding, a Host header naming another
//     authority than the request URI, lines ending in a bare LF, folded
//     header lines, header bytes that are not UTF-8, HTTP versions other
//     than 1.0 and 1.1) marks the connection (Problem): its requests are
//     still handed to the handler, to be denied naming the problem, and it
//     closes.
//   - upstream*.go and upstreamresponse.go: Upstreams, the pools of
//     upstream connections per host and checked address (Key), dropped
//     together when the policy changes (Reset); a Pool's RoundTrip writes
//     a request and reads its response on one goroutine, with a reader as
//     strict (FuzzResponseReader compares it with Go's).
//   - hopbyhop.go: the fields that describe a connection, not a message.
//   - body.go and copy.go: a judged body read whole within a bound and a
//     time (ReadBody), and a response copied with pooled buffers
//     (CopyResponse), flushed read by read when it streams.
//   - rawio_linux.go: sockets read and written with raw system calls
//     through syscall.RawConn (RawIO), sparing each request the wakeup of
//     the runtime's monitor thread; not on linux/386, and not under the
//     race detector, which cannot see them (rawio_race.go).
//   - procs.go: Procs, one P while one request at a time is served, Go's
//     default from the moment two overlap.
//   - limit.go: LimitListener, the bound on connections served at once,
//     whose connections still half-close (CloseWrite).
//   - peek_linux.go: HeadSent, whether a whole request head waits unread
//     on a new connection.
package h1
