package gateway

import (
	"fmt"
	"io"
)

// Banner is what `portcullis gateway` prints once it serves.
type Banner struct {
	// DevLoopback: started with --dev-allow-loopback.
	DevLoopback bool
	// SuppliedToken: the admin token came from TokenVariable
	// (PORTCULLIS_BOOTSTRAP_TOKEN) and is never echoed (it would land in
	// container logs).
	SuppliedToken bool
	TokenVariable string
	// TLS: the console's URL is https.
	TLS bool
	// OCSF names the OCSF sinks ("" for none).
	OCSF string
}

// Write says where the gateway listens, where its data lives, the key
// proxies may pin and, on the first start, the admin token. Scripts wait
// for the console line: only the OCSF sinks' follows it.
func (b Banner) Write(w io.Writer, s Started) {
	fmt.Fprintf(w, "Portcullis gateway listening on %s\n", s.Addr)
	fmt.Fprintf(w, "  store:   %s\n", s.Store)
	fmt.Fprintf(w, "  signing key (proxies may pin it with --gateway-key): %s\n", s.SigningKey)
	if b.DevLoopback {
		fmt.Fprintf(w, "  DEV: --dev-allow-loopback: loopback upstreams can be proposed for (never in production)\n")
	}
	switch {
	case s.CreatedAdmin && b.SuppliedToken:
		fmt.Fprintf(w, "  admin token: the one in %s (stored hashed)\n", b.TokenVariable)
	case s.CreatedAdmin:
		fmt.Fprintf(w, "  admin token (shown once, stored hashed): %s\n", s.AdminToken)
		fmt.Fprintf(w, "  export PORTCULLIS_TOKEN=%s\n", s.AdminToken)
	}
	scheme := "http"
	if b.TLS {
		scheme = "https"
	}
	fmt.Fprintf(w, "  console: %s://%s/\n", scheme, s.Addr)
	if b.OCSF != "" {
		fmt.Fprintf(w, "  ocsf:    %s\n", b.OCSF)
	}
}
