package prover

import (
	"reflect"
	"slices"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// Typed equality of endpoints, for changedEndpoints: reflect.DeepEqual on
// every unchanged endpoint was most of the linear cost of a proof (about
// 1 ms at 1,000 rules). endpointEqual is reflect.DeepEqual on the types
// below (nil and empty slices and maps stay apart, as DeepEqual keeps
// them); the rarely set free-form fields (arguments_schema, GraphQL
// persisted queries) still go through reflect.DeepEqual.
//
// The conversions below stop the build when policy adds, removes or
// retypes a field of these structs, so that no field is forgotten here.
var (
	_ = policy.Endpoint(endpointFields{})
	_ = policy.L7Rule(l7RuleFields{})
	_ = policy.Rule(struct{ Allow *policy.L7Rule }{})
	_ = policy.Matcher(struct{ Any []string }{})
	_ = policy.MCPOptions(struct {
		StrictToolNames         *bool
		MaxBodyBytes            int
		AllowAllKnownMCPMethods bool
		Versions                []string
		FilterToolsList         *bool
		MaxResponseBytes        int
		OAuth                   *policy.MCPOAuth
	}{})
	_ = policy.MCPOAuth(struct {
		ResourceMetadata, AuthorizationServer bool
		ResourceMetadataPaths, IssuerPaths    []string
	}{})
	_ = policy.JSONRPCOptions(struct{ MaxBodyBytes int }{})
	_ = policy.CredentialBinding(struct{ Provider string }{})
	_ = policy.RateLimit(struct{ RequestsPerMinute, Burst int }{})
	_ = policy.Review(struct {
		Required bool
		Timeout  string
	}{})
	_ = policy.Binary(struct {
		Path    string
		Harness *bool
	}{})
)

type endpointFields struct {
	Host                         string
	Port                         int
	Ports                        []int
	Path                         string
	Protocol                     string
	TLS                          string
	Enforcement                  string
	Access                       string
	Rules                        []policy.Rule
	DenyRules                    []*policy.L7Rule
	AllowedIPs                   []string
	AllowEncodedSlash            bool
	WebsocketCredentialRewrite   bool
	RequestBodyCredentialRewrite bool
	AllowUninspectedCredentials  bool
	CredentialSigning            string
	SigningService               string
	SigningRegion                string
	CredentialBinding            *policy.CredentialBinding
	PersistedQueries             string
	GraphQLPersistedQueries      map[string]*policy.PersistedQuery
	GraphQLMaxBodyBytes          int
	JSONRPC                      *policy.JSONRPCOptions
	MCP                          *policy.MCPOptions
}

type l7RuleFields struct {
	Method          string
	Path            string
	Query           map[string]*policy.Matcher
	Command         string
	OperationType   string
	OperationName   string
	Fields          []string
	Tool            *policy.Matcher
	Params          map[string]*policy.Matcher
	Prompt          *policy.Matcher
	Resource        *policy.Matcher
	ArgumentsSchema map[string]any
	ExpiresAt       *time.Time
	Review          *policy.Review
	RateLimit       *policy.RateLimit
	Definition      string
}

// sliceEq is slices.Equal that, like reflect.DeepEqual, tells a nil slice
// from an empty one.
func sliceEq[T comparable](a, b []T) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

func ptrEq[T any](a, b *T, eq func(a, b *T) bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || eq(a, b)
}

func endpointEqual(a, b *policy.Endpoint) bool {
	if a == nil || b == nil || a == b {
		return a == b
	}
	if a.Host != b.Host || a.Port != b.Port || a.Path != b.Path || a.Protocol != b.Protocol || a.TLS != b.TLS ||
		a.Enforcement != b.Enforcement || a.Access != b.Access ||
		a.AllowEncodedSlash != b.AllowEncodedSlash || a.WebsocketCredentialRewrite != b.WebsocketCredentialRewrite ||
		a.RequestBodyCredentialRewrite != b.RequestBodyCredentialRewrite || a.AllowUninspectedCredentials != b.AllowUninspectedCredentials ||
		a.CredentialSigning != b.CredentialSigning || a.SigningService != b.SigningService || a.SigningRegion != b.SigningRegion ||
		a.PersistedQueries != b.PersistedQueries || a.GraphQLMaxBodyBytes != b.GraphQLMaxBodyBytes {
		return false
	}
	if !sliceEq(a.Ports, b.Ports) || !sliceEq(a.AllowedIPs, b.AllowedIPs) {
		return false
	}
	if (a.Rules == nil) != (b.Rules == nil) || len(a.Rules) != len(b.Rules) {
		return false
	}
	for i := range a.Rules {
		if !ptrEq(a.Rules[i].Allow, b.Rules[i].Allow, l7RuleEqual) {
			return false
		}
	}
	if (a.DenyRules == nil) != (b.DenyRules == nil) || len(a.DenyRules) != len(b.DenyRules) {
		return false
	}
	for i := range a.DenyRules {
		if !ptrEq(a.DenyRules[i], b.DenyRules[i], l7RuleEqual) {
			return false
		}
	}
	if !ptrEq(a.CredentialBinding, b.CredentialBinding, func(x, y *policy.CredentialBinding) bool { return *x == *y }) ||
		!ptrEq(a.JSONRPC, b.JSONRPC, func(x, y *policy.JSONRPCOptions) bool { return *x == *y }) ||
		!ptrEq(a.MCP, b.MCP, mcpOptionsEqual) {
		return false
	}
	if a.GraphQLPersistedQueries != nil || b.GraphQLPersistedQueries != nil {
		return reflect.DeepEqual(a.GraphQLPersistedQueries, b.GraphQLPersistedQueries)
	}
	return true
}

func mcpOptionsEqual(a, b *policy.MCPOptions) bool {
	return ptrEq(a.StrictToolNames, b.StrictToolNames, func(x, y *bool) bool { return *x == *y }) &&
		a.MaxBodyBytes == b.MaxBodyBytes && a.AllowAllKnownMCPMethods == b.AllowAllKnownMCPMethods &&
		sliceEq(a.Versions, b.Versions) && a.FiltersToolsList() == b.FiltersToolsList() &&
		a.ResponseLimit() == b.ResponseLimit() && ptrEq(a.OAuth, b.OAuth, func(x, y *policy.MCPOAuth) bool {
		return x.ResourceMetadata == y.ResourceMetadata && x.AuthorizationServer == y.AuthorizationServer &&
			sliceEq(x.ResourceMetadataPaths, y.ResourceMetadataPaths) && sliceEq(x.IssuerPaths, y.IssuerPaths)
	})
}

func matcherEqual(a, b *policy.Matcher) bool { return sliceEq(a.Any, b.Any) }

func matcherMapEqual(a, b map[string]*policy.Matcher) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !ptrEq(x, y, matcherEqual) {
			return false
		}
	}
	return true
}

func l7RuleEqual(a, b *policy.L7Rule) bool {
	if a.Method != b.Method || a.Path != b.Path || a.Command != b.Command || a.OperationType != b.OperationType || a.Definition != b.Definition ||
		a.OperationName != b.OperationName || !sliceEq(a.Fields, b.Fields) {
		return false
	}
	if !ptrEq(a.Tool, b.Tool, matcherEqual) || !matcherMapEqual(a.Query, b.Query) || !matcherMapEqual(a.Params, b.Params) {
		return false
	}
	if !ptrEq(a.Prompt, b.Prompt, matcherEqual) || !ptrEq(a.Resource, b.Resource, matcherEqual) {
		return false
	}
	// reflect.DeepEqual compares time.Time by its fields (wall clock,
	// monotonic reading, location pointer), not by instant.
	if !ptrEq(a.ExpiresAt, b.ExpiresAt, func(x, y *time.Time) bool { return reflect.DeepEqual(*x, *y) }) {
		return false
	}
	if !ptrEq(a.Review, b.Review, func(x, y *policy.Review) bool { return *x == *y }) {
		return false
	}
	if !ptrEq(a.RateLimit, b.RateLimit, func(x, y *policy.RateLimit) bool { return *x == *y }) {
		return false
	}
	if a.ArgumentsSchema != nil || b.ArgumentsSchema != nil {
		return reflect.DeepEqual(a.ArgumentsSchema, b.ArgumentsSchema)
	}
	return true
}
