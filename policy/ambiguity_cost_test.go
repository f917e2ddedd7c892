package policy

import (
	"fmt"
	"strings"
	"testing"
)

// endpointsDoc is a policy of n endpoints on port 443, host(i) each.
func endpointsDoc(n int, host func(int) string) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n  many:\n    binaries: [ { path: /usr/bin/curl } ]\n    endpoints:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - { host: %q, port: 443 }\n", host(i))
	}
	return []byte(b.String())
}

// The ambiguity check compares only endpoints that might name one
// connection: a document of many distinct exact hosts pairs none (its cost
// is its length), and one whose wildcards would need more than
// maxPortPairs comparisons is refused rather than checked for minutes.
func TestAmbiguityCheckIsBounded(t *testing.T) {
	exact := endpointsDoc(20_000, func(i int) string { return fmt.Sprintf("h%d.example.com", i) })
	p, _, err := Parse(exact)
	if err != nil {
		t.Fatalf("20,000 distinct hosts: %v", err)
	}
	if pairs, ok := samePortPairs(documentEndpoints(p)); !ok || len(pairs) != 0 {
		t.Fatalf("distinct exact hosts: %d pairs, ok %v; want none", len(pairs), ok)
	}

	wild := endpointsDoc(2_000, func(i int) string { return fmt.Sprintf("*.h%d.example.com", i) })
	_, _, err = Parse(wild)
	if err == nil || !strings.Contains(err.Error(), "too many to check against each other") {
		t.Fatalf("2,000 wildcards on one port: %v", err)
	}

	// Pairs that can meet are still found: a wildcard against each host
	// below it, never two distinct exact hosts.
	p, _, err = Parse(endpointsDoc(3, func(i int) string { return []string{"a.example.com", "*.example.com", "b.example.com"}[i] }))
	if err != nil {
		t.Fatal(err)
	}
	pairs, ok := samePortPairs(documentEndpoints(p))
	eps := documentEndpoints(p)
	if !ok || len(pairs) != 2 {
		t.Fatalf("pairs %v, ok %v; want the wildcard with each exact host", pairs, ok)
	}
	for _, ij := range pairs {
		if !strings.Contains(eps[ij[0]].ep.Host+eps[ij[1]].ep.Host, "*") {
			t.Fatalf("two exact hosts paired: %v", pairs)
		}
	}
}
