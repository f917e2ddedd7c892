package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	ep0 = "network_policies.p.endpoints[0]"
	ep1 = "network_policies.p.endpoints[1]"
)

// withEndpoint wraps one endpoint (YAML flow mapping) into a document whose
// endpoint path is ep0.
func withEndpoint(ep string) string {
	return "version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n      - " + ep + "\n"
}

// mcpEndpoint is an MCP endpoint with extra fields and the given rules.
func mcpEndpoint(extra, rules string) string {
	return withEndpoint("{host: m.example.com, port: 443, protocol: mcp, enforcement: enforce" + extra + ", rules: [" + rules + "]}")
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	return ve.Problems
}

func hasProblem(ps []Problem, path, msg string) bool {
	for _, p := range ps {
		if p.Path == path && strings.Contains(p.Message, msg) {
			return true
		}
	}
	return false
}

func TestParseErrors(t *testing.T) {
	long := "/" + strings.Repeat("a", 4096)
	var manyPaths strings.Builder
	for i := 0; i < 257; i++ {
		fmt.Fprintf(&manyPaths, "/p%d, ", i)
	}
	var manyMW strings.Builder
	for i := 0; i < 11; i++ {
		fmt.Fprintf(&manyMW, "m%d: {middleware: x, order: %d, endpoints: {include: [a.example.com]}}, ", i, i)
	}
	var manyPatterns strings.Builder
	for i := 0; i < 33; i++ {
		fmt.Fprintf(&manyPatterns, "h%d.example.com, ", i)
	}
	tests := []struct {
		name, doc, path, msg string
	}{
		// Document level.
		{"empty", "", "", "document is empty"},
		{"syntax", "version: [1", "", "yaml"},
		{"not a mapping", "[1, 2]", "", "must be a mapping"},
		{"two documents", "version: 1\n---\nversion: 1\n", "", "more than one YAML document"},
		{"invalid utf-8", "version: 1\nx: \xff\n", "", "UTF-8"},
		{"too large", "version: 1\n#" + strings.Repeat("x", MaxDocumentBytes), "", "limit"},
		{"version missing", "network_policies: {}", "version", "is required"},
		{"version 2", "version: 2", "version", "must be 1"},
		{"version string", `version: "1"`, "version", "must be an integer"},
		{"unknown top-level field", "version: 1\nnetwork_policy: {}", "network_policy", `unknown field; did you mean "network_policies"?`},
		{"misspelt endpoint field", withEndpoint("{host: a.example.com, port: 1, protocl: rest}"), ep0 + ".protocl", `unknown field; did you mean "protocol"?`},
		{"duplicate key yaml", "version: 1\nversion: 1", "version", "duplicate key"},
		{"duplicate key json", `{"version": 1, "network_policies": {"a": {}, "a": {}}}`, `network_policies.a`, "duplicate key"},
		{"duplicate nested key", withEndpoint("{host: a.example.com, port: 1, port: 2}"), ep0 + ".port", "duplicate key"},
		{"wrong type endpoints", "version: 1\nnetwork_policies: {p: {endpoints: {host: a}}}", "network_policies.p.endpoints", "must be a list, not a mapping"},
		{"wrong type binaries", "version: 1\nnetwork_policies: {p: {binaries: /usr/bin/curl}}", "network_policies.p.binaries", "must be a list, not a string"},
		{"wrong type bool", `{version: 1, filesystem_policy: {include_workdir: "yes"}}`, "filesystem_policy.include_workdir", "must be a boolean"},
		{"odd key quoted in path", `{version: 1, network_policies: {"a.b": {endpoints: [{host: x.example.com, port: 1, bogus: 1}]}}}`, `network_policies["a.b"].endpoints[0].bogus`, "unknown field"},

		// filesystem_policy, landlock, process.
		{"relative path", "{version: 1, filesystem_policy: {read_only: [usr]}}", "filesystem_policy.read_only[0]", "absolute"},
		{"dot-dot path", "{version: 1, filesystem_policy: {read_only: [/usr/../etc]}}", "filesystem_policy.read_only[0]", ".."},
		{"rw root", "{version: 1, filesystem_policy: {read_write: [/]}}", "filesystem_policy.read_write[0]", "too broad"},
		{"ro root allowed, rw root not", "{version: 1, filesystem_policy: {read_only: [/], read_write: [//]}}", "filesystem_policy.read_write[0]", "too broad"},
		{"path too long", "{version: 1, filesystem_policy: {read_only: [" + long + "]}}", "filesystem_policy.read_only[0]", "4096"},
		{"too many paths", "{version: 1, filesystem_policy: {read_only: [" + manyPaths.String() + "]}}", "filesystem_policy", "at most 256"},
		{"landlock value", "{version: 1, landlock: {compatibility: strict}}", "landlock.compatibility", "best_effort or hard_requirement"},
		{"process root", "{version: 1, process: {run_as_user: root}}", "process.run_as_user", "root"},
		{"process 0", "{version: 1, process: {run_as_group: 0}}", "process.run_as_group", "root"},
		{"process name", "{version: 1, process: {run_as_user: nobody}}", "process.run_as_user", "sandbox or a numeric id"},
		{"process too large", "{version: 1, process: {run_as_user: 4294967295}}", "process.run_as_user", "1..4294967294"},
		{"process negative", "{version: 1, process: {run_as_user: -5}}", "process.run_as_user", "sandbox or a numeric id"},
		{"process list", "{version: 1, process: {run_as_user: [1]}}", "process.run_as_user", "must be a string"},

		// Endpoint basics.
		{"host missing", withEndpoint("{port: 443}"), ep0 + ".host", "is required"},
		{"host TLD wildcard", withEndpoint("{host: '*.com', port: 443}"), ep0 + ".host", "wildcard"},
		{"host bare star", withEndpoint("{host: '*', port: 443}"), ep0 + ".host", ""},
		{"metadata IP host", withEndpoint("{host: 169.254.169.254, port: 80}"), ep0 + ".host", "metadata"},
		{"metadata decimal host", withEndpoint("{host: '2852039166', port: 80}"), ep0 + ".host", "metadata"},
		{"metadata name host", withEndpoint("{host: METADATA.google.internal., port: 80}"), ep0 + ".host", "metadata"},
		{"metadata v6 host", withEndpoint("{host: '[fd00:ec2::254]', port: 80}"), ep0 + ".host", "metadata"},
		{"port missing", withEndpoint("{host: a.example.com}"), ep0 + ".port", "port or ports is required"},
		{"port zero", withEndpoint("{host: a.example.com, port: 0}"), ep0 + ".port", "between 1 and 65535"},
		{"port too large", withEndpoint("{host: a.example.com, port: 70000}"), ep0 + ".port", "between 1 and 65535"},
		{"port string", withEndpoint(`{host: a.example.com, port: "443"}`), ep0 + ".port", "must be an integer, not a string"},
		{"ports entry zero", withEndpoint("{host: a.example.com, ports: [443, 0]}"), ep0 + ".ports[1]", "between 1 and 65535"},
		{"protocol", withEndpoint("{host: a.example.com, port: 1, protocol: http}"), ep0 + ".protocol", "must be one of"},
		{"tls", withEndpoint("{host: a.example.com, port: 1, tls: off}"), ep0 + ".tls", "skip"},
		{"enforcement", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, enforcement: block}"), ep0 + ".enforcement", "enforce or audit"},
		{"path on L4", withEndpoint("{host: a.example.com, port: 1, path: /x}"), ep0 + ".path", "HTTP protocol"},
		{"endpoint path glob", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, path: '/a**'}"), ep0 + ".path", "**"},

		// access / rules / deny_rules.
		{"access and rules", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, rules: [{allow: {method: GET, path: /}}]}"), ep0 + ".access", "mutually exclusive"},
		{"access on L4", withEndpoint("{host: a.example.com, port: 1, access: full}"), ep0 + ".access", "L7 protocol"},
		{"rest needs access or rules", withEndpoint("{host: a.example.com, port: 1, protocol: rest}"), ep0 + ".rules", "access or rules is required"},
		{"websocket needs access or rules", withEndpoint("{host: a.example.com, port: 1, protocol: websocket}"), ep0 + ".rules", "access or rules is required"},
		{"graphql needs access or rules", withEndpoint("{host: a.example.com, port: 1, protocol: graphql}"), ep0 + ".rules", "access or rules is required"},
		{"sql needs access or rules", withEndpoint("{host: a.example.com, port: 1, protocol: sql}"), ep0 + ".rules", "access or rules is required"},
		{"empty rules", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: []}"), ep0 + ".rules", "must not be empty"},
		{"empty deny_rules", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, deny_rules: []}"), ep0 + ".deny_rules", "must not be empty"},
		{"rules without allow", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{}, {allow: }]}"), ep0 + ".rules", "deny everything"},
		{"deny_rules without protocol", withEndpoint("{host: a.example.com, port: 1, deny_rules: [{method: GET, path: /}]}"), ep0 + ".deny_rules", "L7 protocol"},
		{"rest rule method missing", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {path: /}}]}"), ep0 + ".rules[0].allow.method", "is required"},
		{"rest rule path missing", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET}}]}"), ep0 + ".rules[0].allow.path", "is required"},
		{"rest rule bad method", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: 'GE T', path: /}}]}"), ep0 + ".rules[0].allow.method", "HTTP method"},
		{"rest rule tool", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, tool: x}}]}"), ep0 + ".rules[0].allow.tool", "not valid on protocol rest"},
		{"rest query empty any", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, query: {q: {any: []}}}}]}"), ep0 + ".rules[0].allow.query.q", "at least one glob"},
		{"matcher unknown key", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, query: {q: {all: [x]}}}}]}"), ep0 + ".rules[0].allow.query.q.all", "unknown field"},
		{"websocket method", withEndpoint("{host: a.example.com, port: 1, protocol: websocket, rules: [{allow: {method: POST, path: /}}]}"), ep0 + ".rules[0].allow.method", "WEBSOCKET_TEXT"},
		{"graphql operation_type", withEndpoint("{host: a.example.com, port: 1, protocol: graphql, rules: [{allow: {operation_type: select}}]}"), ep0 + ".rules[0].allow.operation_type", "query, mutation"},
		{"sql command required", withEndpoint("{host: a.example.com, port: 1, protocol: sql, rules: [{allow: {method: GET}}]}"), ep0 + ".rules[0].allow.command", "is required"},
		{"json-rpc access", withEndpoint("{host: a.example.com, port: 1, protocol: json-rpc, access: full}"), ep0 + ".access", "not valid on protocol json-rpc"},
		{"json-rpc glob method", withEndpoint("{host: a.example.com, port: 1, protocol: json-rpc, rules: [{allow: {method: 'reports.*'}}]}"), ep0 + ".rules[0].allow.method", "exact method name or *"},
		{"json-rpc method required", withEndpoint("{host: a.example.com, port: 1, protocol: json-rpc, rules: [{allow: {}}]}"), ep0 + ".rules[0].allow.method", "is required"},
		{"json-rpc rules required", withEndpoint("{host: a.example.com, port: 1, protocol: json-rpc}"), ep0 + ".rules", "required on protocol json-rpc"},

		// MCP.
		{"mcp access", withEndpoint("{host: m.example.com, port: 1, protocol: mcp, access: full}"), ep0 + ".access", "not valid on protocol mcp"},
		{"mcp rules required", withEndpoint("{host: m.example.com, port: 1, protocol: mcp}"), ep0 + ".rules", "allow_all_known_mcp_methods"},
		{"mcp wildcard host", withEndpoint("{host: '*.example.com', port: 1, protocol: mcp, rules: [{allow: {method: initialize}}]}"), ep0 + ".host", "concrete host"},
		{"mcp method required", mcpEndpoint("", "{allow: {tool: x}}"), ep0 + ".rules[0].allow.method", "is required"},
		{"mcp method star", mcpEndpoint(", mcp: {allow_all_known_mcp_methods: true}", "{allow: {method: '*'}}"), ep0 + ".rules[0].allow.method", "must not be *"},
		{"mcp method glob outside tools", mcpEndpoint("", "{allow: {method: 'resources/*'}}"), ep0 + ".rules[0].allow.method", "tools/ method family"},
		{"mcp tool needs tools/call", mcpEndpoint("", "{allow: {method: tools/list, tool: x}}"), ep0 + ".rules[0].allow.tool", "needs method: tools/call"},
		{"mcp params.name needs tools/call", mcpEndpoint("", "{allow: {method: 'tools/*', params: {name: x}}}"), ep0 + ".rules[0].allow.params.name", "needs method: tools/call"},
		{"mcp params other than name", mcpEndpoint("", "{allow: {method: tools/call, params: {arguments: x}}}"), ep0 + ".rules[0].allow.params.arguments", "only params.name"},
		{"mcp tool and params.name", mcpEndpoint("", "{allow: {method: tools/call, tool: x, params: {name: x}}}"), ep0 + ".rules[0].allow.params", "set only one"},
		{"mcp tool glob without strict", mcpEndpoint(", mcp: {strict_tool_names: false}", "{allow: {method: tools/call, tool: 'get_*'}}"), ep0 + ".rules[0].allow.tool", "strict_tool_names"},
		{"mcp strict tool name", mcpEndpoint("", "{allow: {method: tools/call, tool: 'bad name!'}}"), ep0 + ".rules[0].allow.tool", "does not match"},
		{"mcp strict tool name in any", mcpEndpoint("", "{allow: {method: tools/call, tool: {any: [ok, 'no/slash']}}}"), ep0 + ".rules[0].allow.tool", "does not match"},
		{"mcp path in rule", mcpEndpoint("", "{allow: {method: initialize, path: /x}}"), ep0 + ".rules[0].allow.path", "not valid on protocol mcp"},
		{"mcp broad allow mixed with tool rules", mcpEndpoint("", "{allow: {method: tools/call}}, {allow: {method: tools/call, tool: x}}"), ep0 + ".rules[0].allow", "cannot be combined"},
		{"mcp broad glob allow mixed", mcpEndpoint("", "{allow: {method: 'tools/*'}}, {allow: {method: tools/call, tool: x}}"), ep0 + ".rules[0].allow", "cannot be combined"},
		{"mcp broad deny mixed", mcpEndpoint("", "{allow: {method: tools/call, tool: x}}], deny_rules: [{method: tools/call}"), ep0 + ".deny_rules[0]", "cannot be combined"},
		{"mcp allow-all empty rule mixed", mcpEndpoint(", mcp: {allow_all_known_mcp_methods: true}", "{allow: {}}, {allow: {tool: x}}"), ep0 + ".rules[0].allow", "cannot be combined"},
		{"mcp max_body_bytes zero", `{"version": 1, "network_policies": {"orders": {"endpoints": [{"host": "o.example.com", "port": 443, "protocol": "mcp", "mcp": {"max_body_bytes": 0}, "rules": [{"allow": {"method": "initialize"}}]}]}}}`,
			"network_policies.orders.endpoints[0].mcp.max_body_bytes", "must be > 0"},
		{"mcp max_body_bytes negative", mcpEndpoint(", mcp: {max_body_bytes: -1}", "{allow: {method: initialize}}"), ep0 + ".mcp.max_body_bytes", "must be > 0"},
		{"mcp max_body_bytes huge", mcpEndpoint(", mcp: {max_body_bytes: 1000000000}", "{allow: {method: initialize}}"), ep0 + ".mcp.max_body_bytes", "at most"},
		{"mcp version shape", mcpEndpoint(", mcp: {versions: [latest]}", "{allow: {method: initialize}}"), ep0 + ".mcp.versions[0]", "YYYY-MM-DD"},
		{"mcp version unknown", mcpEndpoint(", mcp: {versions: [2025-01-01]}", "{allow: {method: initialize}}"), ep0 + ".mcp.versions[0]", "not a known MCP version"},
		{"mcp versions empty", mcpEndpoint(", mcp: {versions: []}", "{allow: {method: initialize}}"), ep0 + ".mcp.versions", "must not be empty"},
		{"mcp options on rest", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, mcp: {strict_tool_names: true}}"), ep0 + ".mcp", "only valid on protocol mcp"},
		{"mcp unknown option", mcpEndpoint(", mcp: {strict: true}", "{allow: {method: initialize}}"), ep0 + ".mcp.strict", "unknown field"},
		{"json_rpc on mcp", mcpEndpoint(", json_rpc: {max_body_bytes: 10}", "{allow: {method: initialize}}"), ep0 + ".json_rpc", "only valid on protocol json-rpc"},

		// Portcullis extensions.
		{"arguments_schema on rest", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, arguments_schema: {type: object}}}]}"), ep0 + ".rules[0].allow.arguments_schema", "not valid on protocol rest"},
		{"arguments_schema on deny", mcpEndpoint("", "{allow: {method: initialize}}], deny_rules: [{method: tools/call, tool: x, arguments_schema: {type: object}}"), ep0 + ".deny_rules[0].arguments_schema", "only valid on allow rules"},
		{"arguments_schema needs tools/call", mcpEndpoint("", "{allow: {method: initialize, arguments_schema: {type: object}}}"), ep0 + ".rules[0].allow.arguments_schema", "needs method: tools/call"},
		{"arguments_schema tool glob", mcpEndpoint("", "{allow: {method: tools/call, tool: 'get_*', arguments_schema: {type: object}}}"), ep0 + ".rules[0].allow.arguments_schema", "exactly one tool"},
		{"arguments_schema two tools", mcpEndpoint("", "{allow: {method: tools/call, tool: {any: [a, b]}, arguments_schema: {type: object}}}"), ep0 + ".rules[0].allow.arguments_schema", "exactly one tool"},
		{"arguments_schema no tool", mcpEndpoint("", "{allow: {method: tools/call, arguments_schema: {type: object}}}"), ep0 + ".rules[0].allow.arguments_schema", "exactly one tool"},
		{"arguments_schema invalid", mcpEndpoint("", "{allow: {method: tools/call, tool: a, arguments_schema: {type: 5}}}"), ep0 + ".rules[0].allow.arguments_schema", "invalid JSON Schema"},
		{"arguments_schema bad regex", mcpEndpoint("", "{allow: {method: tools/call, tool: a, arguments_schema: {type: string, pattern: '('}}}"), ep0 + ".rules[0].allow.arguments_schema", "invalid JSON Schema"},
		{"arguments_schema external ref", mcpEndpoint("", "{allow: {method: tools/call, tool: a, arguments_schema: {$ref: 'file:///etc/passwd'}}}"), ep0 + ".rules[0].allow.arguments_schema", "invalid JSON Schema"},
		{"arguments_schema not a mapping", mcpEndpoint("", "{allow: {method: tools/call, tool: a, arguments_schema: [1]}}"), ep0 + ".rules[0].allow.arguments_schema", "must be a mapping"},
		{"expires_at on deny", mcpEndpoint("", "{allow: {method: initialize}}], deny_rules: [{method: tools/call, tool: x, expires_at: 2030-01-01T00:00:00Z}"), ep0 + ".deny_rules[0].expires_at", "only valid on allow rules"},
		{"expires_at format", mcpEndpoint("", "{allow: {method: initialize, expires_at: tomorrow}}"), ep0 + ".rules[0].allow.expires_at", "RFC 3339"},
		{"expires_at date only", mcpEndpoint("", "{allow: {method: initialize, expires_at: 2030-01-01}}"), ep0 + ".rules[0].allow.expires_at", "RFC 3339"},

		// allowed_ips.
		{"allowed_ips garbage", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [nope]}"), ep0 + ".allowed_ips[0]", "not an IP address or CIDR"},
		{"allowed_ips leading zeros", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [010.0.0.1]}"), ep0 + ".allowed_ips[0]", "not an IP address or CIDR"},
		{"allowed_ips zone", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['fe80::1%eth0']}"), ep0 + ".allowed_ips[0]", "zone"},
		{"allowed_ips loopback", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [127.0.0.1]}"), ep0 + ".allowed_ips[0]", "loopback"},
		{"allowed_ips loopback v6", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['::1']}"), ep0 + ".allowed_ips[0]", "loopback"},
		{"allowed_ips mapped loopback", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['::ffff:127.0.0.1']}"), ep0 + ".allowed_ips[0]", "loopback"},
		{"allowed_ips link-local", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [169.254.0.0/16]}"), ep0 + ".allowed_ips[0]", "link-local"},
		{"allowed_ips link-local v6", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['fe80::/10']}"), ep0 + ".allowed_ips[0]", "link-local"},
		{"allowed_ips unspecified", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [0.0.0.0]}"), ep0 + ".allowed_ips[0]", "unspecified"},
		{"allowed_ips everything", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [0.0.0.0/0]}"), ep0 + ".allowed_ips[0]", "overlaps"},
		{"allowed_ips v6 everything", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['::/0']}"), ep0 + ".allowed_ips[0]", "overlaps"},
		{"allowed_ips upper half", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [128.0.0.0/1]}"), ep0 + ".allowed_ips[0]", "link-local"},
		{"allowed_ips metadata", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [100.100.100.200]}"), ep0 + ".allowed_ips[0]", "metadata"},
		{"allowed_ips metadata narrow v6", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['fd00:ec2::/64']}"), ep0 + ".allowed_ips[0]", "metadata"},
		{"allowed_ips azure", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [168.63.129.16/32]}"), ep0 + ".allowed_ips[0]", "metadata"},

		// Credentials and GraphQL options.
		{"credential_signing value", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, credential_signing: sigv2, signing_service: s3}"), ep0 + ".credential_signing", "sigv4"},
		{"signing_service required", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, credential_signing: sigv4}"), ep0 + ".signing_service", "required"},
		{"signing vs body rewrite", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, credential_signing: 'sigv4:body', signing_service: s3, request_body_credential_rewrite: true}"), ep0 + ".credential_signing", "mutually exclusive"},
		{"credential_binding provider", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, credential_binding: {}}"), ep0 + ".credential_binding.provider", "required"},
		{"persisted_queries value", withEndpoint("{host: a.example.com, port: 1, protocol: graphql, access: full, persisted_queries: allow}"), ep0 + ".persisted_queries", "deny or allow_registered"},
		{"persisted_queries registry", withEndpoint("{host: a.example.com, port: 1, protocol: graphql, access: full, persisted_queries: allow_registered}"), ep0 + ".persisted_queries", "needs graphql_persisted_queries"},
		{"persisted query type", withEndpoint("{host: a.example.com, port: 1, protocol: graphql, access: full, graphql_persisted_queries: {abc: {operation_type: select}}}"), ep0 + ".graphql_persisted_queries.abc.operation_type", "query, mutation or subscription"},
		{"graphql body limit on rest", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full, graphql_max_body_bytes: 10}"), ep0 + ".graphql_max_body_bytes", "only valid on protocol graphql"},

		// Binaries.
		{"binary glob syntax", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: '/usr/**bin'}]}}", "network_policies.p.binaries[0].path", "**"},
		{"binary not absolute", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: curl}]}}", "network_policies.p.binaries[0].path", "absolute"},
		{"binary missing path", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}], binaries: [{harness: true}]}}", "network_policies.p.binaries[0].path", "is required"},

		// Middlewares.
		{"too many middlewares", "{version: 1, network_middlewares: {" + manyMW.String() + "}}", "network_middlewares", "at most 10"},
		{"duplicate order", "{version: 1, network_middlewares: {a: {middleware: x, order: 1, endpoints: {include: [a.example.com]}}, b: {middleware: y, order: 1, endpoints: {include: [a.example.com]}}}}", "network_middlewares.b.order", "unique"},
		{"middleware required", "{version: 1, network_middlewares: {a: {endpoints: {include: [a.example.com]}}}}", "network_middlewares.a.middleware", "is required"},
		{"on_error value", "{version: 1, network_middlewares: {a: {middleware: x, on_error: ignore, endpoints: {include: [a.example.com]}}}}", "network_middlewares.a.on_error", "fail_closed or fail_open"},
		{"include empty", "{version: 1, network_middlewares: {a: {middleware: x, endpoints: {include: []}}}}", "network_middlewares.a.endpoints.include", "at least one"},
		{"too many patterns", "{version: 1, network_middlewares: {a: {middleware: x, endpoints: {include: [" + manyPatterns.String() + "]}}}}", "network_middlewares.a.endpoints", "at most 32"},
		{"selector pattern", "{version: 1, network_middlewares: {a: {middleware: x, endpoints: {include: ['*.com']}}}}", "network_middlewares.a.endpoints.include[0]", "wildcard"},
		{"config nan", "{version: 1, network_middlewares: {a: {middleware: x, config: {v: .nan}, endpoints: {include: [a.example.com]}}}}", "network_middlewares.a.config.v", "finite"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse accepted the document:\n%s\ncanonical: %s", tc.doc, p.CanonicalJSON())
			}
			if p != nil {
				t.Error("Parse returned a policy with an error")
			}
			ps := problemsOf(t, err)
			if !hasProblem(ps, tc.path, tc.msg) {
				t.Errorf("no problem %q containing %q; got:\n%s", tc.path, tc.msg, err)
			}
		})
	}
}

// TestAllProblemsReported: every mistake is reported, once, with its path.
func TestAllProblemsReported(t *testing.T) {
	doc := `
version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        protocol: mcp
        mcp: {max_body_bytes: 0}
        rules:
          - allow: {method: tools/call, tool: lookup_order, colour: red}
      - host: other.example.com
        port: 99999
    binaries: [{path: /usr/bin/python3}]
`
	_, _, err := Parse([]byte(doc))
	ps := problemsOf(t, err)
	want := []Problem{
		{Path: "network_policies.orders.endpoints[0].mcp.max_body_bytes", Message: "must be > 0"},
		{Path: "network_policies.orders.endpoints[0].rules[0].allow.colour", Message: "unknown field"},
		{Path: "network_policies.orders.endpoints[1].port", Message: "must be between 1 and 65535"},
	}
	if len(ps) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for _, w := range want {
		if !hasProblem(ps, w.Path, w.Message) {
			t.Errorf("missing %s; got %v", w, err)
		}
	}
	if !strings.Contains(err.Error(), "network_policies.orders.endpoints[0].mcp.max_body_bytes: must be > 0; ") {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestWrongTypeNotAlsoReportedMissing(t *testing.T) {
	_, _, err := Parse([]byte(withEndpoint(`{host: [a], port: "1"}`)))
	ps := problemsOf(t, err)
	if len(ps) != 2 {
		t.Fatalf("got %d problems, want 2 (host and port types):\n%v", len(ps), err)
	}
}

func TestParseLimits(t *testing.T) {
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	_, _, err := Parse([]byte("version: 1\nnetwork_middlewares: {m: {middleware: x, endpoints: {include: [a.example.com]}, config: {a: " + deep + "}}}"))
	if err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep nesting: %v", err)
	}
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		bomb += n + ": &" + n + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = n
	}
	doc := "version: 1\nnetwork_middlewares:\n  m:\n    middleware: x\n    endpoints: {include: [a.example.com]}\n    config:\n" + indent(bomb, "      ")
	start := time.Now()
	_, _, err = Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("alias bomb: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("alias bomb took %v", time.Since(start))
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestAliasesAccepted(t *testing.T) {
	doc := `
version: 1
network_policies:
  a:
    endpoints: [&ep {host: a.example.com, port: 443}]
    binaries: [{path: /usr/bin/curl}]
  b:
    endpoints: [*ep]
    binaries: [{path: /usr/bin/curl}]
`
	p, _ := mustParse(t, doc)
	if p.NetworkPolicies["b"].Endpoints[0].Host != "a.example.com" {
		t.Error("alias not followed")
	}
}

func TestValidAccepted(t *testing.T) {
	docs := map[string]string{
		"process ids":              "{version: 1, process: {run_as_user: 1500, run_as_group: '4294967294'}}",
		"mcp allow-all":            mcpEndpoint(", mcp: {allow_all_known_mcp_methods: true}", "{allow: {}}], deny_rules: [{tool: delete_all}, {method: tools/call, tool: 'drop_*'}"),
		"mcp allow-all, no rules":  withEndpoint("{host: m.example.com, port: 443, protocol: mcp, enforcement: enforce, mcp: {allow_all_known_mcp_methods: true}, deny_rules: [{method: tools/call, tool: x}]}"),
		"mcp tool globs":           mcpEndpoint("", "{allow: {method: tools/call, tool: {any: ['get_*', list_orders]}}}, {allow: {method: 'tools/l*'}}], deny_rules: [{method: tools/call, tool: get_secret}"),
		"mcp non-strict":           mcpEndpoint(", mcp: {strict_tool_names: false}", "{allow: {method: tools/call, tool: 'weird name/with slash'}}"),
		"mcp all versions":         mcpEndpoint(", mcp: {versions: [2024-11-05, '2025-03-26', 2025-06-18, 2025-11-25, 2026-07-28]}", "{allow: {method: initialize}}"),
		"arguments_schema":         mcpEndpoint("", `{allow: {method: tools/call, tool: lookup_order, expires_at: "2030-01-01T00:00:00Z", arguments_schema: {type: object, properties: {order_id: {type: string, pattern: '^[A-Z]-\d{4}$'}}, required: [order_id], additionalProperties: false}}}`),
		"schema draft-07":          mcpEndpoint("", `{allow: {method: tools/call, tool: a, arguments_schema: {$schema: "http://json-schema.org/draft-07/schema#", type: object}}}`),
		"schema local ref":         mcpEndpoint("", `{allow: {method: tools/call, tool: a, arguments_schema: {$defs: {id: {type: string}}, properties: {id: {$ref: "#/$defs/id"}}}}}`),
		"json-rpc":                 withEndpoint("{host: j.example.com, port: 443, path: /rpc, protocol: json-rpc, enforcement: enforce, json_rpc: {max_body_bytes: 131072}, rules: [{allow: {method: '*'}}], deny_rules: [{method: reports.delete}]}"),
		"graphql":                  withEndpoint("{host: g.example.com, port: 443, path: /graphql, protocol: graphql, enforcement: enforce, persisted_queries: allow_registered, graphql_persisted_queries: {abc: {operation_type: query, fields: [viewer]}}, rules: [{allow: {operation_type: query, fields: [viewer, repository]}}], deny_rules: [{operation_type: mutation, operation_name: 'Admin*'}]}"),
		"websocket graphql":        withEndpoint("{host: w.example.com, port: 443, protocol: websocket, enforcement: enforce, rules: [{allow: {method: GET, path: /graphql}}, {allow: {operation_type: subscription, fields: [messageAdded]}}]}"),
		"sql":                      withEndpoint("{host: db.example.com, port: 5432, protocol: sql, enforcement: audit, rules: [{allow: {command: SELECT}}]}"),
		"rest query":               withEndpoint("{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: '/**/info/refs', query: {service: 'git-*', tag: {any: ['v1.*', 'v2.*']}}}}], deny_rules: [{method: '*', path: '/admin/**'}]}"),
		"sigv4":                    withEndpoint("{host: bedrock.us-east-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_signing: 'sigv4:no_body', signing_service: bedrock, signing_region: us-east-1, credential_binding: {provider: aws}}"),
		"wildcard host":            withEndpoint("{host: '*.example.com', ports: [443, 8443], allowed_ips: [10.0.0.0/8]}"),
		"ipv6 literal":             withEndpoint("{host: '[2001:db8::1]', port: 443, allowed_ips: ['2001:db8::/32']}"),
		"public IP":                withEndpoint("{host: 8.8.8.8, port: 53}"),
		"rules with a blank entry": withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, rules: [{}, {allow: {method: GET, path: /}}]}"),
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			p, _ := mustParse(t, doc)
			y, err := EncodeYAML(p)
			if err != nil {
				t.Fatal(err)
			}
			q, _, err := Parse(y)
			if err != nil || q.Hash() != p.Hash() {
				t.Errorf("YAML round trip: %v\n%s", err, y)
			}
		})
	}
}

// TestTCPEndpointSupported: a tcp endpoint loads without the warning the
// protocols the proxy does not inspect yet carry; it still needs a host
// (openshell_allowedips_test.go) and has no L7 fields.
func TestTCPEndpointSupported(t *testing.T) {
	_, warns := mustParse(t, withEndpoint("{host: redis.example.com, port: 6379, protocol: tcp, allowed_ips: [10.0.0.0/8]}"))
	for _, w := range warns {
		if strings.HasSuffix(w.Path, ".protocol") {
			t.Errorf("warning on a tcp endpoint: %v", w)
		}
	}
	for field, doc := range map[string]string{
		"access":     withEndpoint("{host: a.example.com, port: 1, protocol: tcp, access: full}"),
		"rules":      withEndpoint("{host: a.example.com, port: 1, protocol: tcp, rules: [{allow: {method: GET}}]}"),
		"deny_rules": withEndpoint("{host: a.example.com, port: 1, protocol: tcp, deny_rules: [{method: GET}]}"),
		"path":       withEndpoint("{host: a.example.com, port: 1, protocol: tcp, path: /x}"),
	} {
		parseProblem(t, doc, ep0+"."+field, "")
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct{ name, doc, path, msg string }{
		{"tls terminate", withEndpoint("{host: a.example.com, port: 1, tls: terminate}"), ep0 + ".tls", "deprecated no-op"},
		{"tls passthrough", withEndpoint("{host: a.example.com, port: 1, tls: passthrough}"), ep0 + ".tls", "deprecated no-op"},
		{"enforcement omitted on L7", withEndpoint("{host: a.example.com, port: 1, protocol: rest, access: full}"), ep0 + ".enforcement", "OpenShell treats an omitted enforcement as audit; Portcullis enforces"},
		{"graphql unsupported", withEndpoint("{host: a.example.com, port: 1, protocol: graphql, enforcement: enforce, access: read-only}"), ep0 + ".protocol", "does not support protocol graphql"},
		{"websocket unsupported", withEndpoint("{host: a.example.com, port: 1, protocol: websocket, enforcement: enforce, access: read-only}"), ep0 + ".protocol", "protocol rest with websocket_credential_rewrite: true carries a WebSocket"},
		{"json-rpc unsupported", withEndpoint("{host: a.example.com, port: 1, protocol: json-rpc, enforcement: enforce, rules: [{allow: {method: a}}]}"), ep0 + ".protocol", "does not support protocol json-rpc"},
		{"sql unsupported", withEndpoint("{host: a.example.com, port: 1, protocol: sql, enforcement: enforce, access: full}"), ep0 + ".protocol", "does not support protocol sql"},
		{"private IP host", withEndpoint("{host: 10.1.2.3, port: 1}"), ep0 + ".host", "private address"},
		{"exact hostname without allowed_ips", withEndpoint("{host: a.example.com, port: 1}"), ep0 + ".host", "resolve to a private address"},
		{"loopback host", withEndpoint("{host: 127.0.0.1, port: 8080}"), ep0 + ".host", "dev-allow-loopback"},
		{"localhost", withEndpoint("{host: localhost, port: 8080}"), ep0 + ".host", "loopback"},
		{"single star path", withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: '/repos/*/pulls'}}]}"), ep0 + ".rules[0].allow.path", "one path segment"},
		{"single star binary", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: '/home/*/bin/x'}]}}", "network_policies.p.binaries[0].path", "one path segment"},
		{"harness", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: /x, harness: true}]}}", "network_policies.p.binaries[0].harness", "deprecated"},
		{"no binaries", "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}]}}", "network_policies.p.binaries", "any program"},
		{"no endpoints", "version: 1\nnetwork_policies: {p: {binaries: [{path: /x}]}}", "network_policies.p.endpoints", "allows nothing"},
		{"wide block holds metadata", withEndpoint("{host: a.example.com, port: 1, allowed_ips: ['fc00::/7']}"), ep0 + ".allowed_ips[0]", "stays denied"},
		{"host bits", withEndpoint("{host: a.example.com, port: 1, allowed_ips: [10.1.2.3/8]}"), ep0 + ".allowed_ips[0]", "host bits"},
		{"control-plane port", withEndpoint("{host: a.example.com, port: 6443}"), ep0, "control-plane"},
		{"uninspected credentials", withEndpoint("{host: a.example.com, port: 1, allow_uninspected_credentials: true}"), ep0 + ".allow_uninspected_credentials", "without inspection"},
		{"semicolon in a path glob", withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: '/a;v=1/b'}}]}"), ep0 + ".rules[0].allow.path", "never matches"},
		{"encoded semicolon in a path glob", withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: '/a%3Bb'}}]}"), ep0 + ".rules[0].allow.path", "OpenShell decodes it"},
		{"upper case in a deny glob", withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: GET, path: '/Admin/**'}]}"), ep0 + ".deny_rules[0].path", `also denies "/admin/**"`},
		{"signing_service alone", withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, access: full, signing_service: s3}"), ep0 + ".signing_service", "ignored"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, warns := mustParse(t, tc.doc)
			if !hasProblem(warns, tc.path, tc.msg) {
				t.Errorf("no warning %q containing %q; got %v", tc.path, tc.msg, warns)
			}
		})
	}
	// Deny globs are read the OpenShell way as well: no divergence, no warning.
	if _, warns := mustParse(t, withEndpoint("{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: GET, path: '/a*'}]}")); hasProblem(warns, ep0+".deny_rules[0].path", "one path segment") {
		t.Errorf("a deny glob got the single-star warning: %v", warns)
	}
	// The private-resolution note comes once per document.
	_, warns := mustParse(t, "version: 1\nnetwork_policies: {p: {endpoints: [{host: a.example.com, port: 1}, {host: b.example.com, port: 1}], binaries: [{path: /x}]}}")
	if n := countProblems(warns, "private address"); n != 1 {
		t.Errorf("private-resolution note appears %d times, want once: %v", n, warns)
	}
	// Warnings come back with errors too.
	_, warns, err := Parse([]byte(withEndpoint("{host: a.example.com, port: 0, tls: terminate}")))
	if err == nil || !hasProblem(warns, ep0+".tls", "deprecated") {
		t.Errorf("warnings with errors: %v, %v", warns, err)
	}
	// No "omitted enforcement" warning on L4 endpoints.
	_, warns = mustParse(t, withEndpoint("{host: a.example.com, port: 1}"))
	if hasProblem(warns, ep0+".enforcement", "") {
		t.Errorf("enforcement warning on an L4 endpoint: %v", warns)
	}
}

func TestValidateGoBuilt(t *testing.T) {
	yes := true
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))
	p := &Policy{
		Version: 1,
		NetworkPolicies: map[string]*NetworkPolicy{
			"orders": {
				Binaries: []Binary{{Path: "/usr/bin/python3"}},
				Endpoints: []*Endpoint{{
					Host: "orders.example.com", Port: 443, Path: "/mcp", Protocol: ProtocolMCP, Enforcement: EnforcementEnforce,
					MCP: &MCPOptions{StrictToolNames: &yes},
					Rules: []Rule{
						{Allow: &L7Rule{Method: "initialize"}},
						{Allow: &L7Rule{Method: "tools/call", Tool: &Matcher{Any: []string{"lookup_order"}}, ExpiresAt: &exp,
							ArgumentsSchema: map[string]any{"type": "object", "maxProperties": 3, "properties": map[string]any{"id": map[string]any{"type": "string"}}}}},
					},
				}},
			},
		},
	}
	before := string(p.CanonicalJSON())
	raw := marshalJSON(p, "")
	if _, err := Validate(p); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if string(marshalJSON(p, "")) != string(raw) {
		t.Error("Validate modified the policy")
	}
	// The Go-built policy and its parsed encoding agree.
	y, err := EncodeYAML(p)
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := Parse(y)
	if err != nil || q.Hash() != p.Hash() || string(q.CanonicalJSON()) != before {
		t.Fatalf("round trip of a Go-built policy: %v\n%s\n%s", err, before, q.CanonicalJSON())
	}

	bad := p.Clone()
	ep := bad.NetworkPolicies["orders"].Endpoints[0]
	ep.Port = 0
	ep.Rules[1].Allow.Method = "*"
	bad.Version = 3
	bad.Process = &Process{RunAsUser: "0"}
	bad.NetworkMiddlewares = map[string]*Middleware{"m": {Middleware: "x", Config: map[string]any{"f": func() {}}, Endpoints: MiddlewareSelector{Include: []string{"a.example.com"}}}}
	_, err = Validate(bad)
	ps := problemsOf(t, err)
	for _, w := range []Problem{
		{Path: "version", Message: "must be 1"},
		{Path: "process.run_as_user", Message: "root"},
		{Path: "network_policies.orders.endpoints[0].port", Message: "required"},
		{Path: "network_policies.orders.endpoints[0].rules[1].allow.method", Message: "must not be *"},
		{Path: "network_middlewares.m.config", Message: "no JSON form"},
	} {
		if !hasProblem(ps, w.Path, w.Message) {
			t.Errorf("missing %s in %v", w, err)
		}
	}
	if _, err := Validate(nil); err == nil {
		t.Error("Validate(nil) succeeded")
	}
	// Hashing an unencodable Go-built policy does not panic.
	_ = bad.Hash()
}

func countProblems(ps []Problem, msg string) int {
	n := 0
	for _, p := range ps {
		if strings.Contains(p.Message, msg) {
			n++
		}
	}
	return n
}

// Checks across endpoints: OpenShell refuses an MCP endpoint that shares
// its host:port with a differently inspected endpoint (a REST `/**` with
// access: full would let every tools/call past the MCP rules), MCP
// endpoints on one host:port that disagree on their options, a fail-closed
// middleware over a `tls: skip` endpoint, and credentials on traffic the
// proxy cannot inspect.
func TestParseCrossEndpointProblems(t *testing.T) {
	mcp := "{host: m.example.com, port: 443, path: /mcp, protocol: mcp, rules: [{allow: {method: tools/call, tool: read}}]}"
	doc := func(eps ...string) string {
		return "version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints: [" + strings.Join(eps, ", ") + "]\n"
	}
	cases := []struct {
		name, doc, path, msg string
	}{
		{"mcp next to rest", doc(mcp, "{host: m.example.com, port: 443, protocol: rest, access: full}"), ep0, "shares m.example.com:443"},
		{"mcp next to l4", doc(mcp, "{host: m.example.com, ports: [80, 443]}"), ep0, "shares m.example.com:443"},
		{"mcp next to wildcard rest", doc(mcp, "{host: '*.example.com', port: 443, protocol: rest, access: full}"), ep0, "shares m.example.com:443"},
		// One address under two spellings (issue 11, finding 5): the
		// proxy inspects by name, so the other spelling is a way around.
		{"mcp next to l4 localhost", doc("{host: 127.0.0.1, port: 8080, path: /mcp, protocol: mcp, rules: [{deny: {method: tools/call, tool: refund_order}}, {allow: {method: tools/list}}]}", "{host: localhost, port: 8080}"), ep0, "shares 127.0.0.1:8080"},
		{"l4 localhost next to rest loopback", doc("{host: 127.0.0.1, port: 8080, protocol: rest, access: read-only}", "{host: localhost, port: 8080}"), ep1 + ".host", "localhost is the address of 127.0.0.1"},
		{"l4 ::1 next to rest localhost", doc("{host: localhost, port: 8080, protocol: rest, access: read-only}", "{host: '::1', port: 8080}"), ep1 + ".host", "::1 is the address of localhost"},
		{"tcp localhost next to rest loopback", doc("{host: 127.0.0.1, port: 8080, protocol: rest, access: read-only}", "{host: localhost, port: 8080, protocol: tcp}"), ep1 + ".host", "localhost is the address of 127.0.0.1"},
		{"mcp next to tcp", doc(mcp, "{host: m.example.com, port: 443, protocol: tcp}"), ep0, "shares m.example.com:443"},
		{"credential binding on tcp", doc("{host: a.example.com, port: 443, protocol: tcp, credential_binding: {provider: gh}}"), ep0 + ".credential_binding", "allow_uninspected_credentials"},
		{"l4 bracketed ::1 next to rest", doc("{host: localhost, port: 8080, protocol: rest, access: read-only}", "{host: '[::1]', port: 8080}"), ep1 + ".host", "is the address of localhost"},
		{"mcp endpoints disagree", doc(mcp, "{host: m.example.com, port: 443, path: /v2, protocol: mcp, mcp: {strict_tool_names: false}, rules: [{allow: {method: initialize}}]}"), ep0, "must agree"},
		{"middleware over tls skip", "version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints: [{host: a.example.com, port: 443, tls: skip}]\n" +
			"network_middlewares:\n  m: {middleware: x, endpoints: {include: ['*.example.com']}}\n", "network_middlewares.m.endpoints.include[0]", "tls: skip"},
		{"credential binding on l4", doc("{host: a.example.com, port: 443, credential_binding: {provider: gh}}"), ep0 + ".credential_binding", "allow_uninspected_credentials"},
		{"credential binding with tls skip", doc("{host: a.example.com, port: 443, protocol: rest, access: full, tls: skip, credential_binding: {provider: gh}}"), ep0 + ".credential_binding", "allow_uninspected_credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse = %v, want a *ValidationError", err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.path && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no problem %q containing %q; got %v", tc.path, tc.msg, ve.Problems)
		})
	}
	// Still valid: one MCP endpoint per path on a host, the same host on
	// another port, a fail-open middleware over tls: skip, the escape hatch.
	for _, ok := range []string{
		doc(mcp, "{host: m.example.com, port: 8443, protocol: rest, access: full}", strings.Replace(mcp, "/mcp", "/v2", 1)),
		"version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints: [{host: a.example.com, port: 443, tls: skip}]\n" +
			"network_middlewares:\n  m: {middleware: x, on_error: fail_open, endpoints: {include: ['*.example.com']}}\n",
		"version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints: [{host: a.example.com, port: 443, tls: skip}]\n" +
			"network_middlewares:\n  m: {middleware: x, endpoints: {include: ['*.example.com'], exclude: [a.example.com]}}\n",
		doc("{host: a.example.com, port: 443, credential_binding: {provider: gh}, allow_uninspected_credentials: true}"),
		// The same address is inspected whole (an IPv4-mapped literal
		// matches the IPv4 endpoint); another port, another loopback
		// address, or both L4, is no alias.
		doc("{host: 8.8.8.8, port: 443, protocol: rest, access: read-only}", "{host: '::ffff:8.8.8.8', port: 443}"),
		doc("{host: localhost, port: 8080, protocol: rest, access: read-only}", "{host: localhost, port: 8080}"),
		doc("{host: 127.0.0.1, port: 8080, protocol: rest, access: read-only}", "{host: localhost, port: 8081}"),
		doc("{host: 127.0.0.1, port: 8080, protocol: rest, access: read-only}", "{host: 127.0.0.2, port: 8080}"),
		doc("{host: 127.0.0.1, port: 8080}", "{host: localhost, port: 8080}"),
		doc("{host: 127.0.0.1, port: 8080, protocol: tcp}", "{host: localhost, port: 8080}"),
	} {
		if _, _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("Parse(%s) = %v, want valid", ok, err)
		}
	}
}

// Problems naming a cloud metadata address carry their code, so tools can
// tell them from other problems.
func TestMetadataProblemsAreCoded(t *testing.T) {
	for _, doc := range []string{
		"version: 1\nnetwork_policies:\n  m:\n    name: m\n    endpoints:\n      - { host: 169.254.169.254, port: 80 }\n",
		"version: 1\nnetwork_policies:\n  m:\n    name: m\n    endpoints:\n      - { host: metadata.google.internal., port: 80 }\n",
		"version: 1\nnetwork_policies:\n  m:\n    name: m\n    endpoints:\n      - { host: api.example.com, port: 443, allowed_ips: [169.254.169.254/32] }\n",
	} {
		_, _, err := Parse([]byte(doc))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("%q: err %v", doc, err)
		}
		coded := 0
		for _, p := range ve.Problems {
			if p.Code == CodeCloudMetadata {
				coded++
			}
		}
		if coded == 0 {
			t.Errorf("%q: no problem coded %s: %v", doc, CodeCloudMetadata, ve.Problems)
		}
	}
	_, _, err := Parse([]byte("version: 1\nnetwork_policies:\n  m:\n    name: m\n    endpoints:\n      - { host: api.example.com, port: 99999 }\n"))
	var ve *ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			if p.Code != "" {
				t.Errorf("a port problem is coded %q", p.Code)
			}
		}
	} else {
		t.Fatalf("bad port accepted: %v", err)
	}
}
