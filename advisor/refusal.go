package advisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Refusal rules: the Rule of a RefusalError, stable strings the gateway
// and CLI can show and tests can match.
const (
	RuleHostWildcard      = "host_wildcard"          // a host glob other than one `*` label below a registrable domain
	RulePublicSuffix      = "public_suffix_wildcard" // a wildcard directly under a public suffix (*.github.io)
	RuleCloudMetadata     = "cloud_metadata"         // a metadata address or name in any spelling
	RulePrivateAddress    = "private_address"        // loopback, link-local, private or otherwise always-denied addresses
	RuleInvalidHost       = "invalid_host"
	RulePort              = "port"             // a missing or control-plane port
	RuleProtocol          = "protocol"         // a protocol the advisor cannot grant narrowly
	RuleBinary            = "binary"           // not exactly one named, clean, absolute binary
	RuleEmptyAllow        = "empty_allow"      // allow: {} or a rule without allow
	RuleMethod            = "method"           // a missing, `*` or glob method
	RulePath              = "path"             // a path glob wider than one segment or a /** tail below a fixed prefix
	RuleQueryInPath       = "query_in_path"    // a `?` or `#` in a proposed path: a query string or fragment is not part of a path
	RuleTool              = "tool"             // a missing or glob tool name
	RulePrompt            = "prompt"           // a missing or glob prompt name
	RuleResource          = "resource"         // a missing, glob or not plain resource URI
	RuleForbiddenField    = "forbidden_field"  // access, tls, enforcement, allowed_ips, credentials, mcp options, …
	RuleUnknownTarget     = "unknown_target"   // the named entry or endpoint does not exist
	RuleAmbiguousTarget   = "ambiguous_target" // several endpoints match: name the path
	RuleEntryExists       = "entry_exists"
	RuleEndpointsMismatch = "endpoints_mismatch" // add_binary does not list exactly the entry's endpoints
	RuleChangesNothing    = "changes_nothing"
	RuleInvalidPolicy     = "invalid_policy"   // the resulting policy does not validate
	RuleNotOffered        = "not_offered"      // a denial the advisor does not offer (version probes)
	RuleTooComplex        = "too_complex"      // globs beyond the intake bounds, or a proof beyond the prover's budget
	RuleArgumentsSchema   = "arguments_schema" // a schema that admits any arguments, or a rule dropping a tool's schema
	RuleArguments         = "arguments"        // a denial by an arguments_schema without (or with other) denied arguments
	RuleDefinition        = "definition"       // a repin's fingerprints, or a definition denial with no definition to pin (repin.go)
)

// RefusalError is why a proposal (or one of its operations) is refused.
// The gateway maps it to InvalidArgument with Op, Field and Rule as
// details.
//
// Apply and Evaluate check every operation and every rule of a proposal
// before answering, so one answer names every narrowness violation: the
// first is the error itself, the others are in Also, in the order of the
// proposal (each with its own field path). A sandbox fixes them all in
// one try.
type RefusalError struct {
	Op     int    // index in operations; -1 for the proposal as a whole
	Field  string // field path, e.g. operations[1].add_allow_rules.rules[0].allow.tool
	Rule   string // one of the Rule… constants
	Reason string // human-readable
	// Also lists the other violations found in the same proposal, in
	// order (their own Also is empty).
	Also []*RefusalError
}

func (e *RefusalError) Error() string {
	if len(e.Also) == 0 {
		return e.one()
	}
	parts := make([]string, 0, len(e.Also)+1)
	for _, r := range e.All() {
		parts = append(parts, r.one())
	}
	return fmt.Sprintf("%d refusals: %s", len(parts), strings.Join(parts, "; "))
}

func (e *RefusalError) one() string {
	where := e.Field
	if where == "" && e.Op >= 0 {
		where = indexPath("operations", e.Op)
	}
	if where == "" {
		return fmt.Sprintf("refused (%s): %s", e.Rule, e.Reason)
	}
	return fmt.Sprintf("%s: refused (%s): %s", where, e.Rule, e.Reason)
}

// All returns e and the refusals in e.Also, in order, each without Also.
func (e *RefusalError) All() []*RefusalError {
	first := *e
	first.Also = nil
	return append([]*RefusalError{&first}, e.Also...)
}

// refusals gathers the violations of one proposal.
type refusals struct{ list []*RefusalError }

// add records err when it is a refusal (with its own Also flattened) and
// returns any other error.
func (rs *refusals) add(err error) error {
	if err == nil {
		return nil
	}
	r, ok := AsRefusal(err)
	if !ok {
		return err
	}
	for _, x := range r.All() {
		if !slices.ContainsFunc(rs.list, func(y *RefusalError) bool {
			return x.Op == y.Op && x.Field == y.Field && x.Rule == y.Rule && x.Reason == y.Reason
		}) {
			rs.list = append(rs.list, x)
		}
	}
	return nil
}

// err returns the gathered refusals as one *RefusalError, nil for none.
func (rs *refusals) err() error {
	if len(rs.list) == 0 {
		return nil
	}
	first := *rs.list[0]
	first.Also = rs.list[1:]
	return &first
}

// AsRefusal returns err as a *RefusalError, if it is one.
func AsRefusal(err error) (*RefusalError, bool) {
	var r *RefusalError
	ok := errors.As(err, &r)
	return r, ok
}

// refuser checks one operation. A check that cannot go on (no such
// target) returns its refusal; checks of independent parts (each
// endpoint, each rule) record theirs in found and go on, so that one
// answer names them all.
type refuser struct {
	op    int
	found *refusals
}

func (r refuser) at(field, rule, format string, args ...any) *RefusalError {
	return &RefusalError{Op: r.op, Field: field, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// keep records err (a refusal of one independent part) and returns any
// error that is not a refusal.
func (r refuser) keep(err error) error {
	return r.found.add(err)
}
