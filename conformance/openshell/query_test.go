package openshell

import "testing"

// Query decoding cases from crates/openshell-supervisor-network/src/l7/rest.rs
// (parse_target_query_*): each decoded value OpenShell asserts is written
// as a query matcher that must accept it (allow) — and, for the refusals,
// the request is denied.

func queryPolicy(key, glob string) string {
	return `
network_policies:
  q:
    name: q
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow:
              method: GET
              path: "/**"
              query:
                ` + key + `: ` + glob + `
    binaries:
      - { path: /usr/bin/curl }
`
}

func queryCase(test, key, glob, query string, v verdict) decideCase {
	return decideCase{Source: restRS + test, Policy: queryPolicy(key, glob), Binary: curl, Host: "api.example.com", Port: 443,
		Method: "GET", Path: "/download", Query: query, OpenShell: v}
}

var queryCases = []decideCase{
	queryCase("parse_target_query_parses_duplicate_values", "tag", `{ any: ["a", "b"] }`, "tag=a&tag=b", allow),
	queryCase("parse_target_query_decodes_percent_and_plus", "slug", `"my/skill"`, "slug=my%2Fskill&name=Foo+Bar", allow),
	queryCase("parse_target_query_decodes_percent_and_plus", "name", `"Foo Bar"`, "slug=my%2Fskill&name=Foo+Bar", allow),
	queryCase("parse_target_query_literal_plus_via_percent_encoding", "q", `"a+b"`, "q=a%2Bb", allow),
	queryCase("parse_target_query_empty_value", "tag", `"*"`, "tag=", allow),
	queryCase("parse_target_query_key_without_value", "verbose", `"*"`, "verbose", allow),
	queryCase("parse_target_query_unicode_after_decoding", "q", `"café"`, "q=caf%C3%A9", allow),
	queryCase("parse_target_query_empty_query_string", "tag", `"*"`, "", deny),
	queryCase("parse_target_query_rejects_malformed_percent_encoding", "slug", `"*"`, "slug=bad%2", deny),
}

func TestQuery(t *testing.T) { runDecide(t, queryCases) }
