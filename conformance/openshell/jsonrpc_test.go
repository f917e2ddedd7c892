package openshell

import (
	"strconv"
	"testing"
)

// Cases from crates/openshell-supervisor-network/src/l7/jsonrpc.rs: the
// JSON-RPC body inspector. OpenShell's parser runs in two modes, generic
// JSON-RPC and MCP; here the proxy inspects MCP only (json-rpc endpoints
// deny everything, DESIGN "uninspected protocols deny"), so each body is
// POSTed through the real proxy to an MCP endpoint whose rules allow every
// method the test names: a body OpenShell's inspector accepts is forwarded,
// one it rejects is refused before policy.

const mcpProxyPolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25", "2025-03-26"]
        rules:
          - allow: { method: initialize }
          - allow: { method: reports.list }
          - allow: { method: reports.search }
          - allow: { method: vendor/extension }
          - allow: { method: tools/call, tool: "*" }
    binaries: []
`

// mcpPost is a POST of body to /mcp on protocol version v.
func mcpPost(v, body string) string {
	return "POST http://HOST/mcp HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: " + v + "\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func mcpCase(test, body string, v verdict) proxyCase {
	return proxyCase{Source: jsonrpcRS + test, Policy: mcpProxyPolicy, Raw: mcpPost("2025-11-25", body), OpenShell: v}
}

// batchCase sends a batch on 2025-03-26, the one listed version that has
// batches.
func batchCase(test, body string, v verdict) proxyCase {
	return proxyCase{Source: jsonrpcRS + test, Policy: mcpProxyPolicy, Raw: mcpPost("2025-03-26", body), OpenShell: v}
}

var jsonrpcCases = []proxyCase{
	mcpCase("parses_method_from_request_body", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`, allow),
	mcpCase("parses_jsonrpc_response_body_without_method", `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{}}}`, allow),
	mcpCase("parses_jsonrpc_error_response_body_without_method", `{"jsonrpc":"2.0","id":"request-1","error":{"code":-32603,"message":"failed"}}`, allow),
	mcpCase("inspection_error_kinds_distinguish_invalid_json_and_messages", `{`, deny),
	batchCase("inspection_error_kinds_distinguish_invalid_json_and_messages", `[]`, deny),
	mcpCase("inspection_error_kinds_distinguish_invalid_json_and_messages", `null`, deny),
	mcpCase("ignores_params_when_extracting_method", `{"jsonrpc":"2.0","id":1,"method":"reports.search","params":{"query":"quarterly","filters":{"scope":"workspace/main"}}}`, allow),
	mcpCase("ignores_dotted_param_collisions_for_generic_jsonrpc", `{"jsonrpc":"2.0","id":1,"method":"reports.search","params":{"filters.scope":{"value":"literal"},"filters":{"scope.value":"nested"}}}`, allow),
	mcpCase("mcp_mode_validates_known_methods_and_extracts_tool", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_web","arguments":{"query":"openshell"}}}`, allow),
	mcpCase("mcp_mode_rejects_non_recommended_tool_names_by_default", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read status","arguments":{}}}`, deny),
	mcpCase("mcp_mode_rejects_invalid_known_method_params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"query":"openshell"}}}`, deny),
	mcpCase("mcp_mode_allows_unknown_extension_methods", `{"jsonrpc":"2.0","id":1,"method":"vendor/extension","params":{"name":"custom"}}`, allow),
	mcpCase("mcp_mode_ignores_tool_arguments_when_extracting_policy_params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_status","arguments":{"scope.key":"literal","scope":{"key":"nested"}}}}`, allow),
	// Positional params are valid JSON-RPC but not MCP (params is an
	// object); OpenShell's test runs the generic JSON-RPC mode, whose
	// endpoints we do not inspect.
	{Source: jsonrpcRS + "accepts_any_valid_jsonrpc_params_shape", Policy: mcpProxyPolicy,
		Raw:       mcpPost("2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"reports.search","params":["ignored",{"nested":true}]}`),
		OpenShell: allow, Divergence: divUninspected, Ours: deny},
	mcpCase("rejects_requests_missing_jsonrpc_version", `{"id":1,"method":"reports.list"}`, deny),
	batchCase("rejects_batch_items_missing_jsonrpc_version", `[{"jsonrpc":"2.0","id":1,"method":"reports.list"},{"id":2,"method":"reports.search","params":{"query":"quarterly"}}]`, deny),
	mcpCase("rejects_unsupported_jsonrpc_version", `{"jsonrpc":"1.0","id":1,"method":"reports.list"}`, deny),
	batchCase("parses_valid_batch_without_error", `[{"jsonrpc":"2.0","id":1,"method":"reports.list"},{"jsonrpc":"2.0","id":2,"method":"reports.search","params":{"query":"quarterly"}}]`, allow),
	batchCase("preserves_current_mcp_batch_acceptance", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_status","arguments":{}}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_web","arguments":{"query":"openshell"}}}]`, allow),
	batchCase("parses_batch_with_calls_and_responses", `[{"jsonrpc":"2.0","id":1,"method":"reports.list"},{"jsonrpc":"2.0","id":2,"result":{"ok":true}}]`, allow),
	mcpCase("rejects_invalid_jsonrpc_response_body", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":-32603,"message":"failed"}}`, deny),
	mcpCase("rejects_message_with_method_and_result_or_error", `{"jsonrpc":"2.0","id":1,"method":"initialize","result":{}}`, deny),
	mcpCase("rejects_message_with_method_and_result_or_error", `{"jsonrpc":"2.0","id":1,"method":"initialize","error":{"code":-32603,"message":"failed"}}`, deny),
	batchCase("rejects_batch_item_with_method_and_result", `[{"jsonrpc":"2.0","id":1,"method":"reports.list"},{"jsonrpc":"2.0","id":2,"method":"initialize","result":{}}]`, deny),
	{Source: jsonrpcRS + "recognizes_streamable_http_get_receive_streams", Policy: mcpProxyPolicy,
		Raw: "GET http://HOST/mcp HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n", OpenShell: allow},
}

func TestJSONRPC(t *testing.T) { runProxy(t, jsonrpcCases) }
