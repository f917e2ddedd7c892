package apiclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// ParseURLs reads a list of gateway URLs separated by commas (the
// replicas of one gateway; empty items are skipped) and checks that each
// is an http(s) URL. Its errors show a URL with its password hidden.
func ParseURLs(list string) ([]*url.URL, error) {
	var urls []*url.URL
	for _, r := range strings.Split(list, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q is not an http:// or https:// URL", redactURL(r))
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, errors.New("no URL")
	}
	return urls, nil
}

// Pick is the replica to call of urls (at least one): the only one, or of
// several the first that accepts a TCP connection within a couple of
// seconds (the first if none does; the call then says it is unavailable).
// Any replica serves every call: they share one store.
func Pick(urls []*url.URL) *url.URL {
	if len(urls) > 1 {
		for _, u := range urls {
			if reachable(u) {
				return u
			}
		}
	}
	return urls[0]
}

// reachable reports whether u's host accepts a TCP connection within a
// couple of seconds.
func reachable(u *url.URL) bool {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// redactURL hides a password in a URL that may not parse.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "…" + raw[i:]
	}
	return raw
}
