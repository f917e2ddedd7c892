// Package mcp owns the strict reading of MCP Streamable HTTP request bodies
// (JSON-RPC 2.0 objects and batches) at an inspected MCP endpoint: Parse
// turns the headers and body of a POST into the messages the matcher
// judges, and anything malformed or ambiguous is an *Error, which means
// deny before policy and forward nothing. parse.go reads the request and
// writes denial bodies; toolslist.go reads a server's answers as strictly
// and cuts tools from tools/list results; json.go builds the tree of a
// message from the strict JSON reader (internal/strictjson), which, unlike
// encoding/json, refuses duplicate keys (here also keys equal ignoring
// case) and every other ambiguity.
//
// It is not the MCP SDK (github.com/modelcontextprotocol/go-sdk/mcp): the
// proxy reads what an agent sends, it does not speak MCP.
package mcp
