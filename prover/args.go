package prover

import (
	"encoding/json"
	"regexp/syntax"
	"strings"
)

// schemaInstance builds arguments an arguments_schema accepts, for the
// common shapes (objects with typed properties, enum/const, patterns,
// lengths, bounds), so that a counterexample for a tool whose rule
// carries a schema is a request the proposed policy really allows. The
// caller re-checks the result with policy.Decide.
func schemaInstance(schema any, depth int) any {
	s, ok := schema.(map[string]any)
	if !ok || depth > 8 {
		return map[string]any{}
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"default", "examples"} {
		if v, ok := s[k]; ok {
			if xs, ok := v.([]any); ok && k == "examples" && len(xs) > 0 {
				return xs[0]
			}
			if k == "default" {
				return v
			}
		}
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	switch typ {
	case "string":
		str := ""
		if f, ok := s["format"].(string); ok {
			str = formatInstances[f] // format is asserted (policy.ValidateArguments)
		}
		if p, ok := s["pattern"].(string); ok {
			str = regexpInstance(p)
		}
		if n, ok := s["minLength"].(float64); ok {
			for len(str) < int(n) {
				str += "a"
			}
		}
		return str
	case "integer", "number":
		if n, ok := s["minimum"].(float64); ok {
			return n
		}
		if n, ok := s["exclusiveMinimum"].(float64); ok {
			return n + 1
		}
		if n, ok := s["maximum"].(float64); ok && n < 0 {
			return n
		}
		return 0
	case "boolean":
		return false
	case "null":
		return nil
	case "array":
		n := 0
		if m, ok := s["minItems"].(float64); ok {
			n = int(m)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = schemaInstance(s["items"], depth+1)
		}
		return out
	}
	obj := map[string]any{}
	props, _ := s["properties"].(map[string]any)
	req, _ := s["required"].([]any)
	for _, r := range req {
		name, _ := r.(string)
		obj[name] = schemaInstance(props[name], depth+1)
	}
	return obj
}

// formatInstances holds a value of each format policy.KnownFormats lists.
var formatInstances = map[string]string{
	"date": "2026-01-01", "date-time": "2026-01-01T12:00:00Z", "duration": "P1D",
	"email": "agent@example.com", "hostname": "example.com", "ipv4": "192.0.2.1",
	"ipv6": "2001:db8::1", "iri": "https://example.com/", "iri-reference": "/",
	"json-pointer": "", "period": "2026-01-01T00:00:00Z/P1D", "regex": "",
	"relative-json-pointer": "0", "semver": "1.0.0", "time": "12:00:00Z",
	"uri": "https://example.com/", "uri-reference": "/", "uri-template": "/",
	"uuid": "00000000-0000-4000-8000-000000000000",
}

// regexpInstance returns a string the (simple) regular expression
// matches: the first alternative, the minimum repetition, the first
// character of each class.
func regexpInstance(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return ""
	}
	var sb strings.Builder
	var walk func(*syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		switch r.Op {
		case syntax.OpLiteral:
			sb.WriteString(string(r.Rune))
		case syntax.OpCharClass:
			if len(r.Rune) > 0 {
				sb.WriteRune(r.Rune[0])
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			sb.WriteByte('a')
		case syntax.OpCapture, syntax.OpConcat:
			for _, s := range r.Sub {
				walk(s)
			}
		case syntax.OpAlternate:
			if len(r.Sub) > 0 {
				walk(r.Sub[0])
			}
		case syntax.OpPlus:
			walk(r.Sub[0])
		case syntax.OpRepeat:
			for range r.Min {
				walk(r.Sub[0])
			}
		}
	}
	walk(re)
	return sb.String()
}

func marshalArgs(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("{}")
	}
	return raw
}
