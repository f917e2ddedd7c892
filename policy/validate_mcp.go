package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// This file holds the checks on MCP rules: tool matchers, arguments_schema,
// rate_limit and mixing tools/call with other methods.

// ruleTool returns the tool matcher of an MCP rule, whichever spelling
// (tool or params.name) it uses.
func ruleTool(r *L7Rule) *Matcher {
	if r.Tool != nil {
		return r.Tool
	}
	if r.Params != nil {
		return r.Params["name"]
	}
	return nil
}

// ToolGlobs lists every tool glob an MCP rule names, in both spellings
// (tool, then params.name): the advisor and the prover read rules with
// it, valid or not.
func (r *L7Rule) ToolGlobs() []string {
	var ts []string
	for _, m := range []*Matcher{r.Tool, r.Params["name"]} {
		if m != nil {
			ts = append(ts, m.Any...)
		}
	}
	return ts
}

func (v *validator) mcpRule(path string, ep *Endpoint, r *L7Rule, allow bool) {
	allowAll, strict := allowAllKnown(ep), strictNames(ep)
	mp := keyPath(path, "method")
	switch {
	case r.Method == "":
		if !allowAll {
			v.errorf(mp, "is required unless mcp.allow_all_known_mcp_methods is true")
		}
	case r.Method == "*":
		v.errorf(mp, "must not be * on protocol mcp; omit it with mcp.allow_all_known_mcp_methods: true")
	case hasGlobMeta(r.Method):
		if !strings.HasPrefix(r.Method, "tools/") {
			v.errorf(mp, "globs are allowed only in the tools/ method family (such as tools/*)")
		} else if err := ValidGlob(r.Method); err != nil {
			v.errorf(mp, "%v", err)
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"path", r.Path != ""}, {"query", r.Query != nil}, {"command", r.Command != ""},
		{"operation_type", r.OperationType != ""}, {"operation_name", r.OperationName != ""}, {"fields", r.Fields != nil},
	} {
		if f.set {
			v.errorf(keyPath(path, f.name), "is not valid on protocol mcp")
		}
	}
	for _, k := range sortedKeys(r.Params) {
		if k != "name" {
			v.errorf(keyPath(keyPath(path, "params"), k), "MCP rules accept only params.name (tool arguments are matched with arguments_schema)")
		}
	}
	if r.Tool != nil && r.Params != nil && r.Params["name"] != nil {
		v.errorf(keyPath(path, "params"), "tool and params.name are two spellings of one matcher; set only one")
	}
	toolPath := keyPath(path, "tool")
	if r.Tool == nil && r.Params != nil {
		toolPath = keyPath(keyPath(path, "params"), "name")
	}
	tool := ruleTool(r)
	if tool != nil || len(r.Params) > 0 {
		methodOK := r.Method == "tools/call" || (allowAll && r.Method == "")
		if !methodOK {
			v.errorf(toolPath, "needs method: tools/call")
		}
	}
	if tool != nil {
		v.matcher(toolPath, tool)
		for _, g := range tool.Any {
			if hasGlobMeta(g) {
				if !strict {
					v.errorf(toolPath, "tool globs need mcp.strict_tool_names: true")
				}
			} else if strict && !ValidToolName(g) {
				v.errorf(toolPath, "tool name %q does not match ^[A-Za-z0-9_.-]{1,128}$ (required by mcp.strict_tool_names)", g)
			}
		}
	}
	if r.Prompt != nil {
		pp := keyPath(path, "prompt")
		if r.Method != "prompts/get" {
			v.errorf(pp, "needs method: prompts/get")
		}
		v.matcher(pp, r.Prompt)
	}
	if r.Resource != nil {
		rp := keyPath(path, "resource")
		if !IsResourceMethod(r.Method) {
			v.errorf(rp, "needs method: resources/read, resources/subscribe or resources/unsubscribe")
		}
		v.matcher(rp, r.Resource)
		for i, g := range r.Resource.Any {
			if HasBraceAlternatives(g) {
				p := rp
				if len(r.Resource.Any) > 1 {
					p = indexPath(keyPath(rp, "any"), i)
				}
				v.errorf(p, "glob %q: a resource glob cannot hold { or } (they never occur in a plain URI, and are not alternatives)", g)
			}
		}
	}
	// The tools/call options of an allow rule: where each may stand.
	callsTools := callsTools(ep, r)
	oneTool := tool != nil && len(sortedUnique(tool.Any)) == 1 && !hasGlobMeta(tool.Any[0])
	toolsCallOption := func(p string, needsOneTool bool) bool {
		switch {
		case !allow:
			v.errorf(p, "is only valid on allow rules")
		case !callsTools:
			v.errorf(p, "needs method: tools/call")
		case needsOneTool && !oneTool:
			v.errorf(p, "needs the rule to name exactly one tool, without globs")
		default:
			return true
		}
		return false
	}
	if r.ArgumentsSchema != nil {
		if sp := keyPath(path, "arguments_schema"); toolsCallOption(sp, true) {
			v.argumentsSchema(sp, r.ArgumentsSchema)
		}
	}
	if r.Definition != "" {
		if dp := keyPath(path, "definition"); toolsCallOption(dp, true) && !ValidDefinition(r.Definition) {
			v.errorf(dp, "%q is not a definition fingerprint: want \"sha256:\" and 64 lower-case hex digits (portcullis mcp fingerprint prints them)", r.Definition)
		}
	}
	if r.RateLimit != nil {
		if lp := keyPath(path, "rate_limit"); toolsCallOption(lp, false) {
			v.rateLimit(lp, r.RateLimit)
		}
	}
}

// rateLimit checks a rate_limit's numbers: requests_per_minute is
// required, and both it and burst lie in 1..MaxRateLimit.
func (v *validator) rateLimit(path string, rl *RateLimit) {
	rp, bp := keyPath(path, "requests_per_minute"), keyPath(path, "burst")
	switch {
	case rl.RequestsPerMinute == 0:
		v.errorf(rp, "is required (an integer from 1 to %d)", MaxRateLimit)
	case rl.RequestsPerMinute < 0 || rl.RequestsPerMinute > MaxRateLimit:
		v.errorf(rp, "must be an integer from 1 to %d", MaxRateLimit)
	}
	if rl.Burst < 0 || rl.Burst > MaxRateLimit {
		v.errorf(bp, "must be an integer from 1 to %d (omit it for requests_per_minute)", MaxRateLimit)
	}
}

// argumentsSchema checks an arguments_schema: it must compile; each format
// keyword is reported where it stands — an error when the format cannot be
// asserted, else a warning that it is asserted (JSON Schema 2020-12 only
// annotates format unless told otherwise).
func (v *validator) argumentsSchema(path string, schema map[string]any) {
	schemaFormats(schema, path, func(p, name string) {
		if assertedFormats[name] {
			v.warnf(p, "format %q is asserted: a string that is not a valid %s is refused (JSON Schema 2020-12 only annotates format by default)", name, name)
		} else {
			v.errorf(p, "format %q cannot be checked (known: %s); Portcullis asserts formats, so a format it cannot check would refuse nothing", name, strings.Join(KnownFormats(), ", "))
		}
	})
	var unknown *UnknownFormatError
	if _, err := CompileArgumentsSchema(schema); err != nil && !errors.As(err, &unknown) {
		v.errorf(path, "invalid JSON Schema: %v", err)
	}
}

// callsTools reports whether an MCP rule is a tools/call rule, the only
// MCP rules the tools/call options (arguments_schema, definition,
// rate_limit, review) may stand on: method tools/call, or a tool matcher
// without method under allow_all_known_mcp_methods.
func callsTools(ep *Endpoint, r *L7Rule) bool {
	return r.Method == "tools/call" || allowAllKnown(ep) && r.Method == "" && ruleTool(r) != nil
}

// matchesToolsCall reports whether an MCP rule's method selects tools/call.
func matchesToolsCall(method string, allowAll bool) bool {
	if method == "" {
		return allowAll
	}
	if method == "tools/call" {
		return true
	}
	return hasGlobMeta(method) && MatchGlob(method, "tools/call")
}

// mcpToolMixing refuses a broad tools/call rule next to tool-specific allow
// rules: the broad rule would bypass (allow) or erase (deny) the tool filter.
// The same holds for prompts/get and prompt-specific rules, and for each
// resources method and resource-specific rules.
func (v *validator) mcpToolMixing(path string, ep *Endpoint, allowAll bool) {
	families := []struct {
		method, field string
		matcher       func(*L7Rule) *Matcher
	}{
		{"tools/call", "tool", ruleTool},
		{"prompts/get", "prompt", func(r *L7Rule) *Matcher { return r.Prompt }},
	}
	for _, m := range ResourceMethods() {
		families = append(families, struct {
			method, field string
			matcher       func(*L7Rule) *Matcher
		}{m, "resource", func(r *L7Rule) *Matcher { return r.Resource }})
	}
	for _, f := range families {
		selects := func(r *L7Rule) bool {
			if f.method == "tools/call" {
				return matchesToolsCall(r.Method, allowAll)
			}
			return r.Method == f.method || r.Method == "" && allowAll
		}
		specific := false
		for _, r := range ep.Rules {
			if r.Allow != nil && f.matcher(r.Allow) != nil && selects(r.Allow) {
				specific = true
			}
		}
		if !specific {
			continue
		}
		broad := func(p string, r *L7Rule) {
			if r != nil && f.matcher(r) == nil && selects(r) {
				v.errorf(p, "a rule matching every %s cannot be combined with %s-specific allow rules; add %s, or remove the %s-specific rules",
					f.method, f.field, f.field, f.field)
			}
		}
		for i, r := range ep.Rules {
			broad(keyPath(indexPath(keyPath(path, "rules"), i), "allow"), r.Allow)
		}
		for i, r := range ep.DenyRules {
			broad(indexPath(keyPath(path, "deny_rules"), i), r)
		}
	}
}

// CompileArgumentsSchema compiles an arguments_schema as JSON Schema (draft
// 2020-12 unless it says otherwise), with format asserted (see
// ValidateArguments). It never loads anything: a $ref to a file or URL is
// an error, so validating a policy cannot read the gateway's disk or reach
// the network. A schema number beyond the argument number limits is an
// error, and so (an *UnknownFormatError) is a format that cannot be
// asserted. The validator, Decide and the proxy's matcher all compile
// through it, so each sees the schema the validator accepted.
func CompileArgumentsSchema(schema map[string]any) (*jsonschema.Schema, error) {
	if err := checkJSONValue(schema, 0); err != nil {
		return nil, err
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if err := compileArgumentsDoc(doc); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	const url = "urn:portcullis:arguments_schema"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not allowed", url)
}
