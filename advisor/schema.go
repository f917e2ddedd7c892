package advisor

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/portcullis-dev/portcullis/policy"
)

// Argument schemas in proposals. A tools/call allow rule with an
// arguments_schema admits the call only with arguments the schema
// accepts. A proposal may widen what a tool admits by adding a rule for
// it with another schema (allow rules are a union: the tool then admits
// anyOf the schemas), never by dropping the guard: a rule without a
// schema for a tool that only schema rules name, and a schema that
// evidently admits every arguments object, are refused
// (RuleArgumentsSchema). Whether one schema admits more than another is
// not decided here: the prover reports every changed schema as
// arguments_widened, which always needs a human.

// schemaGuard returns the index of an allow rule of ep that names the
// tool with an arguments_schema, when no allow rule names it without one
// (so the tool's arguments are guarded); -1 otherwise.
func schemaGuard(ep *policy.Endpoint, tool string) int {
	guard := -1
	for i, r := range ep.Rules {
		a := r.Allow
		if a == nil || !namesTool(a, tool) {
			continue
		}
		if a.ArgumentsSchema == nil {
			return -1
		}
		if guard < 0 {
			guard = i
		}
	}
	return guard
}

// namesTool reports whether an allow rule may match tools/call of tool.
func namesTool(a *policy.L7Rule, tool string) bool {
	if a.Method != "" && !policy.MatchGlob(a.Method, "tools/call") {
		return false
	}
	return slices.ContainsFunc(a.ToolGlobs(), func(g string) bool { return policy.MatchGlob(g, tool) })
}

// admitsEverything reports whether a schema evidently accepts every
// arguments object (MCP arguments are always an object): true, {}, only
// annotations, type: object and keywords that constrain nothing, or an
// anyOf with such a branch — or, whatever its keywords (not, oneOf,
// if/then, bounds no call reaches), a schema that accepts every probe
// object (acceptsProbes). Neither is a decision of JSON Schema inclusion.
func admitsEverything(schema any) bool {
	return vacuous(schema, true, 0) || acceptsProbes(schema)
}

// probeValues are the values acceptsProbes puts under a key: one of each
// JSON type, nested.
var probeValues = []any{
	map[string]any{"portcullis_probe": []any{json.Number("1"), "x", true, nil, map[string]any{"y": json.Number("-2.5")}}},
	[]any{map[string]any{}, json.Number("0")},
	"portcullis probe",
	json.Number("123456"),
	json.Number("-1.5"),
	true,
	nil,
}

// acceptsProbes reports whether schema accepts every probe object: the
// empty object, and an object holding each probe value under a key the
// schema does not name and under each of its properties. A schema that
// requires a key, constrains a property's value or refuses unknown keys
// refuses one of them.
func acceptsProbes(schema any) bool {
	m, ok := schema.(map[string]any)
	if !ok {
		return false
	}
	compiled, err := policy.CompileArgumentsSchema(m)
	if err != nil {
		return false // refused elsewhere
	}
	keys := []string{"portcullis_probe_key"}
	if props, ok := m["properties"].(map[string]any); ok {
		for k := range props {
			keys = append(keys, k)
		}
	}
	if policy.ValidateArguments(compiled, map[string]any{}) != nil {
		return false
	}
	for _, k := range keys {
		for _, v := range probeValues {
			if policy.ValidateArguments(compiled, map[string]any{k: v}) != nil {
				return false
			}
		}
	}
	return true
}

// annotations are keywords that never refuse an instance.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$anchor": true, "$defs": true, "definitions": true,
	"title": true, "description": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true,
}

// vacuous reports whether schema accepts every value (object: every
// object).
func vacuous(schema any, object bool, depth int) bool {
	if depth > 16 {
		return false
	}
	switch s := schema.(type) {
	case bool:
		return s
	case map[string]any:
		for k, v := range s {
			if annotations[k] {
				continue
			}
			if !vacuousKeyword(k, v, object, depth) {
				return false
			}
		}
		return true
	}
	return false
}

func vacuousKeyword(k string, v any, object bool, depth int) bool {
	all := func(xs any, obj bool) bool {
		switch t := xs.(type) {
		case []any:
			for _, x := range t {
				if !vacuous(x, obj, depth+1) {
					return false
				}
			}
			return true
		case map[string]any:
			for _, x := range t {
				if !vacuous(x, false, depth+1) {
					return false
				}
			}
			return true
		}
		return false
	}
	switch k {
	case "anyOf":
		xs, ok := v.([]any)
		return ok && slices.ContainsFunc(xs, func(x any) bool { return vacuous(x, object, depth+1) })
	case "allOf":
		return all(v, object)
	case "not":
		b, ok := v.(bool)
		return ok && !b
	}
	if !object {
		return false
	}
	switch k {
	case "type":
		switch t := v.(type) {
		case string:
			return t == "object"
		case []any:
			return slices.Contains(t, any("object"))
		}
	case "properties", "patternProperties":
		return all(v, false)
	case "additionalProperties", "unevaluatedProperties", "propertyNames":
		return vacuous(v, false, depth+1)
	case "required":
		xs, ok := v.([]any)
		return ok && len(xs) == 0
	case "minProperties":
		n, ok := v.(float64)
		return ok && n <= 0
	}
	return false
}

// checkSchemaRule refuses an allow rule that would drop or void the guard
// on a tool of ep: no arguments_schema where ep guards the tool, or a
// schema that admits every arguments object.
func (r refuser) checkSchemaRule(fp string, ep *policy.Endpoint, a *policy.L7Rule) error {
	return r.checkSchemaRuleAt(fp, ep, "", a)
}

// checkSchemaRuleAt is checkSchemaRule with where naming ep in the
// refusal ("" for the endpoint the rule is added to).
func (r refuser) checkSchemaRuleAt(fp string, ep *policy.Endpoint, where string, a *policy.L7Rule) error {
	if a == nil || a.Method != "tools/call" {
		return nil
	}
	sp := keyPath(keyPath(fp, "allow"), "arguments_schema")
	if a.ArgumentsSchema != nil {
		if admitsEverything(normalSchema(a.ArgumentsSchema)) {
			return r.at(sp, RuleArgumentsSchema, "admits any arguments: a proposed arguments_schema must constrain them (the narrowest is {\"const\": <the arguments>})")
		}
		return nil
	}
	if ep == nil {
		return nil
	}
	for _, t := range a.ToolGlobs() {
		if i := schemaGuard(ep, t); i >= 0 {
			return r.at(sp, RuleArgumentsSchema, "tools/call %s is guarded by the arguments_schema of %srules[%d]; a rule without one would admit any arguments: give an arguments_schema that admits only what is needed", t, where, i)
		}
	}
	return nil
}

// normalSchema is a schema as generic JSON (numbers float64), whatever
// the decoder that built it.
func normalSchema(m map[string]any) any {
	raw, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return m
	}
	return v
}

// constSchema is the arguments_schema that admits exactly the canonical
// arguments c.
func constSchema(c []byte) (map[string]any, error) {
	var v any
	if err := json.Unmarshal(c, &v); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	return map[string]any{"const": v}, nil
}
