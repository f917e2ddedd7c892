package policy

import "strings"

// This file holds the checks on network_middlewares: their own fields and,
// across the document, a fail_closed middleware over a `tls: skip` endpoint.

func (v *validator) middlewares(ms map[string]*Middleware) {
	if len(ms) > maxMiddlewares {
		v.errorf("network_middlewares", "has %d entries; at most %d are allowed", len(ms), maxMiddlewares)
	}
	orders := map[int]string{}
	for _, key := range sortedKeys(ms) {
		path := keyPath("network_middlewares", key)
		m := ms[key]
		if m == nil {
			v.errorf(path, "must be a mapping")
			continue
		}
		if m.Middleware == "" {
			v.errorf(keyPath(path, "middleware"), "is required")
		}
		if other, dup := orders[m.Order]; dup {
			v.errorf(keyPath(path, "order"), "%d is also the order of %s; orders must be unique", m.Order, other)
		} else {
			orders[m.Order] = key
		}
		switch m.OnError {
		case "", "fail_closed", "fail_open":
		default:
			v.errorf(keyPath(path, "on_error"), "must be fail_closed or fail_open")
		}
		if err := checkJSONValue(m.Config, 0); err != nil {
			v.errorf(keyPath(path, "config"), "%v", err)
		}
		ep := keyPath(path, "endpoints")
		if len(m.Endpoints.Include) == 0 {
			v.errorf(keyPath(ep, "include"), "must name at least one host pattern")
		}
		if n := len(m.Endpoints.Include) + len(m.Endpoints.Exclude); n > maxSelectorPatterns {
			v.errorf(ep, "has %d patterns; at most %d are allowed", n, maxSelectorPatterns)
		}
		for _, list := range []struct {
			name     string
			patterns []string
		}{{"include", m.Endpoints.Include}, {"exclude", m.Endpoints.Exclude}} {
			for i, pat := range list.patterns {
				if err := ValidHostPattern(pat); err != nil {
					v.errorf(indexPath(keyPath(ep, list.name), i), "%v", err)
				}
			}
		}
	}
}

// middlewaresOverSkippedTLS refuses, as OpenShell does, a fail_closed
// middleware whose selector can cover a `tls: skip` endpoint: the proxy
// cannot run it on traffic it does not decrypt, so the stage could never
// do what fail_closed promises.
func (v *validator) middlewaresOverSkippedTLS(ms map[string]*Middleware, eps []pathedEndpoint) {
	for _, key := range sortedKeys(ms) {
		m := ms[key]
		if m == nil || m.OnError == "fail_open" {
			continue
		}
		for i, inc := range m.Endpoints.Include {
			for _, e := range eps {
				if e.ep.TLS != "skip" || !hostsOverlap(inc, e.ep.Host) || excluded(m.Endpoints.Exclude, e.ep.Host) {
					continue
				}
				v.errorf(indexPath(keyPath(keyPath(keyPath("network_middlewares", key), "endpoints"), "include"), i),
					"can select %s (%s), which has tls: skip and cannot be inspected; a fail_closed middleware must not cover it (exclude it or use on_error: fail_open)", canonicalHost(e.ep.Host), e.path)
				break
			}
		}
	}
}

// excluded reports whether an exclude list covers every host an endpoint
// host pattern names.
func excluded(exclude []string, host string) bool {
	for _, x := range exclude {
		if canonicalHost(x) == canonicalHost(host) || !strings.Contains(host, "*") && MatchHost(x, host) {
			return true
		}
	}
	return false
}
