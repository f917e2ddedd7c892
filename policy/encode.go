package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// EncodeJSON returns p's canonical form as indented JSON (two spaces, a
// trailing newline). Parse of the result gives the same Hash.
func EncodeJSON(p *Policy) ([]byte, error) {
	if p == nil {
		return nil, errors.New("encode policy: nil policy")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p.Canonical()); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeYAML returns p's canonical form as YAML, for `policy fmt` and
// `policy get -o yaml`: block style, two-space indent, fields in schema
// order, map keys sorted. Parse of the result gives the same Hash.
//
// It is built from the canonical JSON, so the YAML and JSON encodings carry
// exactly the same fields and matcher shapes.
func EncodeYAML(p *Policy) ([]byte, error) {
	if p == nil {
		return nil, errors.New("encode policy: nil policy")
	}
	root, err := jsonToNode(p.CanonicalJSON())
	if err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	plainStyle(root)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	return buf.Bytes(), nil
}

// plainStyle drops the JSON quoting of strings; the encoder quotes again
// exactly those that would otherwise read back as another type ("1500",
// "2025-11-25", "true", "*").
func plainStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style = 0
	}
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// MarshalJSON writes a matcher in canonical form: one glob as a plain
// string, several as {"any": [sorted, de-duplicated globs]}.
func (m Matcher) MarshalJSON() ([]byte, error) {
	globs := sortedUnique(m.Any)
	if len(globs) == 1 {
		return json.Marshal(globs[0])
	}
	if globs == nil {
		globs = []string{}
	}
	return json.Marshal(struct {
		Any []string `json:"any"`
	}{globs})
}

// UnmarshalJSON reads a glob string or {"any": [globs]}; other fields are
// errors.
func (m *Matcher) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		m.Any = []string{s}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var obj struct {
		Any []string `json:"any"`
	}
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("matcher must be a glob string or {\"any\": [globs]}: %w", err)
	}
	m.Any = obj.Any
	if m.Any == nil {
		m.Any = []string{}
	}
	return nil
}

// MarshalYAML writes a matcher as MarshalJSON does.
func (m Matcher) MarshalYAML() (any, error) {
	globs := sortedUnique(m.Any)
	if len(globs) == 1 {
		return globs[0], nil
	}
	if globs == nil {
		globs = []string{}
	}
	return map[string][]string{"any": globs}, nil
}

// UnmarshalYAML reads a glob string or {any: [globs]}, strictly.
func (m *Matcher) UnmarshalYAML(n *yaml.Node) error {
	d := &decoder{}
	var out Matcher
	if rn := d.resolve(n); rn != nil {
		d.decodeMatcher(rn, "", &out)
	}
	if len(d.problems) > 0 {
		return &ValidationError{Problems: d.problems}
	}
	*m = out
	return nil
}
