package listing

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Reach is how `portcullis mcp fingerprint` reaches a server: through a
// proxy (a Portcullis proxy, as the agent does), trusting extra CAs (the
// proxy's, when it terminates TLS), with headers on every request.
type Reach struct {
	Proxy   string   // the proxy's URL ("": none)
	CAFile  string   // PEM certificates to trust besides the system's ("": none)
	Headers []string // "Name: value" each
}

// Apply sets cfg's Transport and Header from r. Its errors name the
// command's flags (--proxy, --ca-file, --header).
func (r Reach) Apply(cfg *Config) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.Proxy != "" {
		u, err := url.Parse(r.Proxy)
		if err != nil || u.Host == "" {
			return fmt.Errorf("--proxy %q is not a URL such as http://127.0.0.1:3128", r.Proxy)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if r.CAFile != "" {
		pem, err := os.ReadFile(r.CAFile)
		if err != nil {
			return fmt.Errorf("--ca-file: %v", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca-file %s holds no PEM certificate", r.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	h := http.Header{}
	for _, kv := range r.Headers {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("--header %q: want 'Name: value'", kv)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	cfg.Transport, cfg.Header = tr, h
	return nil
}
