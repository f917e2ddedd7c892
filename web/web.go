// Package web is the operator console, embedded into the binary and served
// by the gateway at /. It calls the same Connect APIs as the CLI, with
// Connect's JSON protocol from the browser: signed in by the gateway's
// session cookie (gateway/session.go), every call carrying the session's
// CSRF token; a stream (the proxies' enforcement of a version) uses
// Connect's streaming JSON protocol over fetch. Pages: the approval queue,
// a proposal (diff, findings, approvals, approve/reject, once applied its
// enforcement by the proxies, live), a sandbox (policy, history, diff,
// rollback, proxies, who froze it and its timeline), the incidents (what
// Sentry's quarantines did, and the held ones' freeze/dismiss) and the
// audit log.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Static is the console's assets: index.html (sign-in and the app's
// shell), app.js (an ES module calling the Connect APIs with fetch) and
// style.css. No build step: what is here is what the browser runs.
func Static() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Handler serves the console's static assets. The gateway adds the
// security headers (a strict Content-Security-Policy among them) and the
// session endpoint.
func Handler() http.Handler {
	return http.FileServerFS(Static())
}
