// Package web is the operator console, embedded into the binary and served
// by the gateway at /. It calls the same Connect APIs as the CLI.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the console's static assets.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServerFS(sub)
}
