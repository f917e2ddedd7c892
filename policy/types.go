package policy

import (
	"slices"
	"strings"
	"time"
)

// Policy is one policy document. Field names and shapes follow OpenShell's
// policy schema so that OpenShell documents are accepted unchanged.
type Policy struct {
	// Version is the schema version; it must be 1.
	Version int `json:"version" yaml:"version"`

	// Static sections: fixed by a sandbox's first policy version.
	FilesystemPolicy *FilesystemPolicy `json:"filesystem_policy,omitempty" yaml:"filesystem_policy,omitempty"`
	Landlock         *Landlock         `json:"landlock,omitempty" yaml:"landlock,omitempty"`
	Process          *Process          `json:"process,omitempty" yaml:"process,omitempty"`

	// Dynamic sections.
	NetworkPolicies    map[string]*NetworkPolicy `json:"network_policies,omitempty" yaml:"network_policies,omitempty"`
	NetworkMiddlewares map[string]*Middleware    `json:"network_middlewares,omitempty" yaml:"network_middlewares,omitempty"`
}

// FilesystemPolicy says which paths the agent may read and write.
type FilesystemPolicy struct {
	IncludeWorkdir bool     `json:"include_workdir,omitempty" yaml:"include_workdir,omitempty"`
	ReadOnly       []string `json:"read_only,omitempty" yaml:"read_only,omitempty"`
	ReadWrite      []string `json:"read_write,omitempty" yaml:"read_write,omitempty"`
}

// Landlock configures kernel filesystem enforcement.
type Landlock struct {
	// Compatibility is "best_effort" (default) or "hard_requirement".
	Compatibility string `json:"compatibility,omitempty" yaml:"compatibility,omitempty"`
}

// Process sets the identity the agent runs as. Each field is "sandbox" or a
// numeric id in 1..4294967294; an omitted field is left to the runtime.
type Process struct {
	RunAsUser  string `json:"run_as_user,omitempty" yaml:"run_as_user,omitempty"`
	RunAsGroup string `json:"run_as_group,omitempty" yaml:"run_as_group,omitempty"`
}

// NetworkPolicy is one entry of network_policies: the listed binaries may
// reach the listed endpoints. An empty Binaries list means any binary.
type NetworkPolicy struct {
	// Name is the display name; it defaults to the map key.
	Name      string      `json:"name,omitempty" yaml:"name,omitempty"`
	Endpoints []*Endpoint `json:"endpoints" yaml:"endpoints"`
	Binaries  []Binary    `json:"binaries" yaml:"binaries"`
}

// Binary names an executable by absolute path; `*` and `**` globs allowed.
type Binary struct {
	Path string `json:"path" yaml:"path"`
	// Harness is deprecated in OpenShell and ignored; it is accepted (with a
	// warning) so older documents still parse.
	Harness *bool `json:"harness,omitempty" yaml:"harness,omitempty"`
}

// Protocols an endpoint may declare. The empty protocol is L4 through the
// explicit proxy.
const (
	ProtocolL4        = ""
	ProtocolTCP       = "tcp"
	ProtocolREST      = "rest"
	ProtocolMCP       = "mcp"
	ProtocolWebSocket = "websocket"
	ProtocolGraphQL   = "graphql"
	ProtocolJSONRPC   = "json-rpc"
	ProtocolSQL       = "sql"
)

// Enforcement modes.
const (
	EnforcementEnforce = "enforce"
	EnforcementAudit   = "audit"
)

// Access presets.
const (
	AccessReadOnly  = "read-only"
	AccessReadWrite = "read-write"
	AccessFull      = "full"
)

// Defaults filled in by the canonical form.
const (
	DefaultMaxBodyBytes = 65536
	DefaultMCPVersion   = "2025-11-25"
)

// Endpoint is a destination (host and port or ports, optionally a path
// scope) and, for L7 protocols, the rules that decide each request to it.
type Endpoint struct {
	Host  string `json:"host,omitempty" yaml:"host,omitempty"`
	Port  int    `json:"port,omitempty" yaml:"port,omitempty"`
	Ports []int  `json:"ports,omitempty" yaml:"ports,omitempty"`
	// Path is an HTTP path glob selecting between L7 endpoints on one host:port.
	Path     string `json:"path,omitempty" yaml:"path,omitempty"`
	Protocol string `json:"protocol,omitempty" yaml:"protocol,omitempty"`
	// TLS is "" (auto), "skip", or the deprecated no-ops "terminate"/"passthrough".
	TLS string `json:"tls,omitempty" yaml:"tls,omitempty"`
	// Enforcement is "enforce" or "audit". Omitted means enforce (OpenShell: audit).
	Enforcement string `json:"enforcement,omitempty" yaml:"enforcement,omitempty"`
	// Access is a REST preset; exclusive with Rules.
	Access     string    `json:"access,omitempty" yaml:"access,omitempty"`
	Rules      []Rule    `json:"rules,omitempty" yaml:"rules,omitempty"`
	DenyRules  []*L7Rule `json:"deny_rules,omitempty" yaml:"deny_rules,omitempty"`
	AllowedIPs []string  `json:"allowed_ips,omitempty" yaml:"allowed_ips,omitempty"`

	AllowEncodedSlash            bool `json:"allow_encoded_slash,omitempty" yaml:"allow_encoded_slash,omitempty"`
	WebsocketCredentialRewrite   bool `json:"websocket_credential_rewrite,omitempty" yaml:"websocket_credential_rewrite,omitempty"`
	RequestBodyCredentialRewrite bool `json:"request_body_credential_rewrite,omitempty" yaml:"request_body_credential_rewrite,omitempty"`
	AllowUninspectedCredentials  bool `json:"allow_uninspected_credentials,omitempty" yaml:"allow_uninspected_credentials,omitempty"`

	// CredentialSigning is "sigv4", "sigv4:body" or "sigv4:no_body".
	CredentialSigning string             `json:"credential_signing,omitempty" yaml:"credential_signing,omitempty"`
	SigningService    string             `json:"signing_service,omitempty" yaml:"signing_service,omitempty"`
	SigningRegion     string             `json:"signing_region,omitempty" yaml:"signing_region,omitempty"`
	CredentialBinding *CredentialBinding `json:"credential_binding,omitempty" yaml:"credential_binding,omitempty"`

	// GraphQL options.
	PersistedQueries        string                     `json:"persisted_queries,omitempty" yaml:"persisted_queries,omitempty"`
	GraphQLPersistedQueries map[string]*PersistedQuery `json:"graphql_persisted_queries,omitempty" yaml:"graphql_persisted_queries,omitempty"`
	GraphQLMaxBodyBytes     int                        `json:"graphql_max_body_bytes,omitempty" yaml:"graphql_max_body_bytes,omitempty"`

	JSONRPC *JSONRPCOptions `json:"json_rpc,omitempty" yaml:"json_rpc,omitempty"`
	MCP     *MCPOptions     `json:"mcp,omitempty" yaml:"mcp,omitempty"`
}

// CredentialBinding ties an endpoint to a credential provider.
type CredentialBinding struct {
	Provider string `json:"provider" yaml:"provider"`
}

// PersistedQuery is one trusted GraphQL persisted query.
type PersistedQuery struct {
	OperationType string   `json:"operation_type" yaml:"operation_type"`
	OperationName string   `json:"operation_name,omitempty" yaml:"operation_name,omitempty"`
	Fields        []string `json:"fields,omitempty" yaml:"fields,omitempty"`
}

// JSONRPCOptions are the options of a `protocol: json-rpc` endpoint.
type JSONRPCOptions struct {
	MaxBodyBytes int `json:"max_body_bytes,omitempty" yaml:"max_body_bytes,omitempty"`
}

// MCPOptions are the options of a `protocol: mcp` endpoint.
type MCPOptions struct {
	// StrictToolNames defaults to true: tool names must match
	// ^[A-Za-z0-9_.-]{1,128}$, and tool globs need it.
	StrictToolNames *bool `json:"strict_tool_names,omitempty" yaml:"strict_tool_names,omitempty"`
	// MaxBodyBytes defaults to 65536, counted on the bytes read.
	MaxBodyBytes            int  `json:"max_body_bytes,omitempty" yaml:"max_body_bytes,omitempty"`
	AllowAllKnownMCPMethods bool `json:"allow_all_known_mcp_methods,omitempty" yaml:"allow_all_known_mcp_methods,omitempty"`
	// Versions lists the accepted MCP protocol versions; default ["2025-11-25"].
	Versions []string `json:"versions,omitempty" yaml:"versions,omitempty"`
	// FilterToolsList (Portcullis extension) defaults to true: the proxy
	// removes from tools/list results the tools the policy would not let
	// the agent call. Canonical form omits it when true.
	FilterToolsList *bool `json:"filter_tools_list,omitempty" yaml:"filter_tools_list,omitempty"`
	// MaxResponseBytes (Portcullis extension) bounds a client's JSON-RPC
	// responses to the requests the server sent it through the proxy
	// (sampling, elicitation, roots): default DefaultMaxResponseBytes.
	// Canonical form omits the default.
	MaxResponseBytes int `json:"max_response_bytes,omitempty" yaml:"max_response_bytes,omitempty"`
	// OAuth (Portcullis extension) lets the MCP server's host:port serve
	// the OAuth paths an MCP client discovers and uses, as plain HTTP
	// (OAuthPath lists them).
	OAuth *MCPOAuth `json:"oauth,omitempty" yaml:"oauth,omitempty"`
}

// MCPOAuth declares the OAuth paths an MCP endpoint's host:port serves.
type MCPOAuth struct {
	// ResourceMetadata: GET (and HEAD) /.well-known/oauth-protected-resource
	// and below it (RFC 9728, MCP 2025-06-18 and later).
	ResourceMetadata bool `json:"resource_metadata,omitempty" yaml:"resource_metadata,omitempty"`
	// AuthorizationServer: an authorization server on the same host:port,
	// as MCP 2025-03-26 defines it — GET (and HEAD)
	// /.well-known/oauth-authorization-server and
	// /.well-known/openid-configuration (and below them), GET /authorize,
	// POST /token and POST /register.
	AuthorizationServer bool `json:"authorization_server,omitempty" yaml:"authorization_server,omitempty"`
	// ResourceMetadataPaths (with ResourceMetadata): further exact paths
	// serving the resource's metadata, GET (and HEAD): RFC 9728 lets a
	// server name any metadata URL in its WWW-Authenticate header.
	ResourceMetadataPaths []string `json:"resource_metadata_paths,omitempty" yaml:"resource_metadata_paths,omitempty"`
	// IssuerPaths (with AuthorizationServer): the path components of the
	// authorization server's issuer (RFC 8414), under each of which it
	// also serves the paths AuthorizationServer lists: GET
	// ISSUER/.well-known/oauth-authorization-server and
	// ISSUER/.well-known/openid-configuration, GET ISSUER/authorize,
	// POST ISSUER/token and POST ISSUER/register. (The well-known paths
	// with the issuer path after them are covered by AuthorizationServer.)
	IssuerPaths []string `json:"issuer_paths,omitempty" yaml:"issuer_paths,omitempty"`
}

// OAuthPath reports whether an HTTP request with this method to path (the
// canonical path) is one of the OAuth paths o declares, and names the
// declaration ("mcp.oauth.resource_metadata" or
// "mcp.oauth.authorization_server"). Such a request is plain HTTP, not
// JSON-RPC, and passes once the endpoint's host and port match.
func (o *MCPOptions) OAuthPath(method, path string) (string, bool) {
	if o == nil || o.OAuth == nil {
		return "", false
	}
	get := method == "GET" || method == "HEAD"
	under := func(prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	switch {
	case o.OAuth.ResourceMetadata && get && (under("/.well-known/oauth-protected-resource") || slices.Contains(o.OAuth.ResourceMetadataPaths, path)):
		return "mcp.oauth.resource_metadata", true
	case !o.OAuth.AuthorizationServer:
		return "", false
	case get && (under("/.well-known/oauth-authorization-server") || under("/.well-known/openid-configuration")),
		authorizationServerPath(method, path, ""):
		return "mcp.oauth.authorization_server", true
	}
	for _, issuer := range o.OAuth.IssuerPaths {
		if rest, ok := strings.CutPrefix(path, issuer); ok && strings.HasPrefix(rest, "/") && authorizationServerPath(method, rest, issuer) {
			return "mcp.oauth.authorization_server", true
		}
	}
	return "", false
}

// authorizationServerPath reports whether path, below an issuer path
// (after it was cut off; "" for none), is one an authorization server on
// an MCP server's host:port serves: /authorize (GET), /token and
// /register (POST), and below an issuer path its well-known metadata
// (GET).
func authorizationServerPath(method, path, issuer string) bool {
	get := method == "GET" || method == "HEAD"
	switch {
	case get && path == "/authorize", method == "POST" && (path == "/token" || path == "/register"):
		return true
	case issuer != "" && get:
		return path == "/.well-known/oauth-authorization-server" || path == "/.well-known/openid-configuration"
	}
	return false
}

// DefaultMaxResponseBytes is the default mcp.max_response_bytes: a
// sampling result may carry an image.
const DefaultMaxResponseBytes = 4 << 20

// ResponseLimit is the endpoint's mcp.max_response_bytes, the default
// filled in.
func (o *MCPOptions) ResponseLimit() int {
	if o == nil || o.MaxResponseBytes == 0 {
		return DefaultMaxResponseBytes
	}
	return o.MaxResponseBytes
}

// FiltersToolsList reports whether an MCP endpoint with these options
// filters tools/list results (the default).
func (o *MCPOptions) FiltersToolsList() bool {
	return o == nil || o.FilterToolsList == nil || *o.FilterToolsList
}

// Rule is one entry of an endpoint's rules list. An entry without Allow
// allows nothing.
type Rule struct {
	Allow *L7Rule `json:"allow,omitempty" yaml:"allow,omitempty"`
}

// L7Rule matches L7 requests. Allow rules sit under `rules[].allow`; deny
// rules are the entries of `deny_rules` directly. Which fields apply depends
// on the endpoint's protocol.
type L7Rule struct {
	// REST / WebSocket / JSON-RPC / MCP method; REST and WebSocket with path.
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	Path   string `json:"path,omitempty" yaml:"path,omitempty"`
	// Query matches decoded query parameters by name.
	Query map[string]*Matcher `json:"query,omitempty" yaml:"query,omitempty"`
	// Command is the SQL command (protocol sql).
	Command string `json:"command,omitempty" yaml:"command,omitempty"`
	// GraphQL.
	OperationType string   `json:"operation_type,omitempty" yaml:"operation_type,omitempty"`
	OperationName string   `json:"operation_name,omitempty" yaml:"operation_name,omitempty"`
	Fields        []string `json:"fields,omitempty" yaml:"fields,omitempty"`
	// MCP: Tool matches tools/call params.name; Params accepts only "name",
	// the lower-level spelling of the same matcher.
	Tool   *Matcher            `json:"tool,omitempty" yaml:"tool,omitempty"`
	Params map[string]*Matcher `json:"params,omitempty" yaml:"params,omitempty"`
	// Prompt (MCP, method prompts/get) matches params.name; Resource (MCP,
	// methods resources/read, resources/subscribe, resources/unsubscribe)
	// matches params.uri as sent (see MatchResource).
	Prompt   *Matcher `json:"prompt,omitempty" yaml:"prompt,omitempty"`
	Resource *Matcher `json:"resource,omitempty" yaml:"resource,omitempty"`

	// ArgumentsSchema (Portcullis extension, tools/call allow rules only) is
	// a JSON Schema that params.arguments must satisfy.
	ArgumentsSchema map[string]any `json:"arguments_schema,omitempty" yaml:"arguments_schema,omitempty"`
	// ExpiresAt (Portcullis extension, allow rules only) ends the grant.
	ExpiresAt *time.Time `json:"expires_at,omitempty" yaml:"expires_at,omitempty"`
	// Review (allow rules of REST endpoints and MCP tools/call; OpenShell's
	// spelling of the flag) holds each call the rule allows until a person
	// approves that very call (a held call).
	Review *Review `json:"review,omitempty" yaml:"review,omitempty"`
	// RateLimit (Portcullis extension, MCP tools/call allow rules only)
	// bounds how often the calls this rule allows pass each proxy.
	RateLimit *RateLimit `json:"rate_limit,omitempty" yaml:"rate_limit,omitempty"`
	// Definition (Portcullis extension, MCP tools/call allow rules naming
	// one tool) pins the tool's definition: "sha256:<hex>", the SHA-256 of
	// the tool object as the server lists it, canonicalised with RFC 8785
	// (JCS). The rule allows a call only while the proxy has verified the
	// tool's current definition to be this one.
	Definition string `json:"definition,omitempty" yaml:"definition,omitempty"`
}

// ValidDefinition reports whether s is a tool definition fingerprint as
// rules pin it: "sha256:" and 64 lower-case hex digits.
func ValidDefinition(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Review asks for a person's approval of each call an allow rule admits.
type Review struct {
	// Required turns the review on; a review that is not required is the
	// same as none.
	Required bool `json:"required" yaml:"required"`
	// Timeout is how long a call is held for a decision, a Go duration
	// ("90s", "2m"): DefaultReviewTimeout when omitted, at most
	// MaxReviewTimeout.
	Timeout string `json:"timeout,omitempty" yaml:"timeout,omitempty"`
}

// DefaultReviewTimeout and MaxReviewTimeout bound how long a held call
// waits for a person.
const (
	DefaultReviewTimeout = 2 * time.Minute
	MaxReviewTimeout     = 15 * time.Minute
)

// MaxReviewedArguments bounds what a held call shows a person: a
// tools/call's arguments as JSON, a REST call's body. A larger call that
// needs review is refused at the proxy, before anything is filed.
const MaxReviewedArguments = 64 << 10

// Wait is how long a call this review holds waits: the timeout, or the
// default when it is omitted or does not parse (validation refuses that).
func (r *Review) Wait() time.Duration {
	if d, err := time.ParseDuration(r.Timeout); err == nil && d > 0 {
		return d
	}
	return DefaultReviewTimeout
}

// RateLimit is a token bucket on the calls one allow rule admits: it holds
// at most Burst tokens, refills RequestsPerMinute of them a minute, and
// every call takes one. Each proxy keeps its own buckets, so N proxies of
// one sandbox admit N times the rate.
type RateLimit struct {
	// RequestsPerMinute is the refill rate, 1..MaxRateLimit.
	RequestsPerMinute int `json:"requests_per_minute" yaml:"requests_per_minute"`
	// Burst is the bucket's size, 1..MaxRateLimit; omitted, it is
	// RequestsPerMinute (the canonical form writes it out).
	Burst int `json:"burst,omitempty" yaml:"burst,omitempty"`
}

// MaxRateLimit bounds requests_per_minute and burst.
const MaxRateLimit = 1_000_000

// Matcher matches a string against any of its globs. In documents it is
// either a single glob string or `{any: [glob, ...]}`.
type Matcher struct {
	Any []string `json:"any" yaml:"any"`
}

// Middleware is one entry of network_middlewares.
type Middleware struct {
	Name       string             `json:"name,omitempty" yaml:"name,omitempty"`
	Middleware string             `json:"middleware" yaml:"middleware"`
	Order      int                `json:"order,omitempty" yaml:"order,omitempty"`
	Config     map[string]any     `json:"config,omitempty" yaml:"config,omitempty"`
	OnError    string             `json:"on_error,omitempty" yaml:"on_error,omitempty"`
	Endpoints  MiddlewareSelector `json:"endpoints" yaml:"endpoints"`
}

// MiddlewareSelector selects hosts by glob; exclusions win.
type MiddlewareSelector struct {
	Include []string `json:"include" yaml:"include"`
	Exclude []string `json:"exclude,omitempty" yaml:"exclude,omitempty"`
}
