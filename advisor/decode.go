package advisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/portcullis-dev/portcullis/policy"
)

// This file is a strict YAML/JSON decoder in the style of policy/parse.go
// (whose decoder is unexported): unknown fields, duplicate keys and values
// of the wrong type are each reported with their field path, and decoding
// carries on so that every problem is reported at once.

const (
	maxNesting  = 64
	maxNodes    = 1 << 16
	maxProblems = 100
)

// yamlToNode parses exactly one YAML document.
func yamlToNode(data []byte) (n *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("yaml: cannot parse document: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("document is empty")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("document holds more than one YAML document")
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, errors.New("document is empty")
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

// jsonToNode converts a valid JSON document into a yaml.Node tree, keeping
// duplicate keys so that they can be reported.
func jsonToNode(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	depth := 0
	var value func() (*yaml.Node, error)
	value = func() (*yaml.Node, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case json.Delim:
			depth++
			defer func() { depth-- }()
			if depth > maxNesting+8 {
				return nil, fmt.Errorf("json: nested more than %d levels deep", maxNesting)
			}
			switch t {
			case '{':
				n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, err
					}
					k, _ := kt.(string)
					v, err := value()
					if err != nil {
						return nil, err
					}
					n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
				}
				_, err := dec.Token()
				return n, err
			case '[':
				n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
				for dec.More() {
					v, err := value()
					if err != nil {
						return nil, err
					}
					n.Content = append(n.Content, v)
				}
				_, err := dec.Token()
				return n, err
			}
		case string:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t, Style: yaml.DoubleQuotedStyle}, nil
		case json.Number:
			tag := "!!int"
			if strings.ContainsAny(string(t), ".eE") {
				tag = "!!float"
			}
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
		case bool:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
		case nil:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
		}
		return nil, fmt.Errorf("json: unexpected token %v", tok)
	}
	return value()
}

type decoder struct {
	problems []policy.Problem
	nodes    int
	stopped  bool
}

func (d *decoder) add(path, format string, args ...any) {
	switch {
	case len(d.problems) < maxProblems:
		d.problems = append(d.problems, policy.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	case len(d.problems) == maxProblems:
		d.problems = append(d.problems, policy.Problem{Message: fmt.Sprintf("more than %d problems; the rest are not shown", maxProblems)})
	}
}

var (
	matcherType = reflect.TypeFor[policy.Matcher]()
	timeType    = reflect.TypeFor[time.Time]()
)

func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	d.nodes++
	if d.nodes > maxNodes {
		if !d.stopped {
			d.add("", "document has more than %d values (YAML aliases included)", maxNodes)
			d.stopped = true
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!timestamp":
		return "a timestamp"
	}
	return "a value tagged " + n.ShortTag()
}

// keyPath appends a mapping key to a path: `.key` for plain names,
// `["key"]` otherwise.
func keyPath(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if !plain {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func (d *decoder) mappingPairs(n *yaml.Node, path string) (keys []string, values []*yaml.Node) {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		if k == nil {
			return keys, values
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.add(path, "mapping key must be a string, not %s", describe(k))
			continue
		}
		if seen[k.Value] {
			d.add(keyPath(path, k.Value), "duplicate key")
			continue
		}
		seen[k.Value] = true
		keys = append(keys, k.Value)
		values = append(values, n.Content[i+1])
	}
	return keys, values
}

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value, depth int) {
	if n = d.resolve(n); n == nil {
		return
	}
	if depth > maxNesting {
		d.add(path, "nested more than %d levels deep", maxNesting)
		return
	}
	if isNull(n) {
		return
	}
	t := v.Type()
	switch t {
	case matcherType:
		d.decodeMatcher(n, path, v.Addr().Interface().(*policy.Matcher))
		return
	case timeType:
		d.decodeTime(n, path, v.Addr().Interface().(*time.Time))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		e := reflect.New(t.Elem())
		d.decode(n, path, e.Elem(), depth)
		v.Set(e)
	case reflect.Struct:
		d.decodeStruct(n, path, v, depth)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.add(path, "must be a list, not %s", describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, indexPath(path, i), s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.add(path, "must be a mapping, not %s", describe(n))
			return
		}
		m := reflect.MakeMap(t)
		keys, values := d.mappingPairs(n, path)
		for i, k := range keys {
			e := reflect.New(t.Elem()).Elem()
			d.decode(values[i], keyPath(path, k), e, depth+1)
			m.SetMapIndex(reflect.ValueOf(k), e)
		}
		v.Set(m)
	case reflect.String:
		if s, ok := d.stringValue(n, path); ok {
			v.SetString(s)
		}
	case reflect.Int:
		if i, ok := d.intValue(n, path); ok {
			v.SetInt(i)
		}
	case reflect.Uint64:
		if i, ok := d.intValue(n, path); ok {
			if i < 0 {
				d.add(path, "must not be negative")
				return
			}
			v.SetUint(uint64(i))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.add(path, "must be a boolean, not %s", describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.add(path, "must be a boolean")
			return
		}
		v.SetBool(b)
	case reflect.Interface:
		if val, ok := d.anyValue(n, path, depth); ok && val != nil {
			v.Set(reflect.ValueOf(val))
		}
	default:
		d.add(path, "cannot decode into %s", t)
	}
}

func fieldIndex(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		m[name] = i
	}
	return m
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value, depth int) {
	if n.Kind != yaml.MappingNode {
		d.add(path, "must be a mapping, not %s", describe(n))
		return
	}
	fields := fieldIndex(v.Type())
	keys, values := d.mappingPairs(n, path)
	for i, k := range keys {
		fp := keyPath(path, k)
		idx, ok := fields[k]
		if !ok {
			d.add(fp, "unknown field")
			continue
		}
		d.decode(values[i], fp, v.Field(idx), depth+1)
	}
}

func (d *decoder) stringValue(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!timestamp") {
		d.add(path, "must be a string, not %s", describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) intValue(n *yaml.Node, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.add(path, "must be an integer, not %s", describe(n))
		return 0, false
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		d.add(path, "integer %s is out of range", n.Value)
		return 0, false
	}
	return i, true
}

func (d *decoder) decodeTime(n *yaml.Node, path string, out *time.Time) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!timestamp") {
		d.add(path, "must be an RFC 3339 time, not %s", describe(n))
		return
	}
	t, err := time.Parse(time.RFC3339Nano, n.Value)
	if err != nil {
		d.add(path, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		return
	}
	*out = t.UTC()
}

func (d *decoder) decodeMatcher(n *yaml.Node, path string, m *policy.Matcher) {
	switch n.Kind {
	case yaml.ScalarNode:
		if s, ok := d.stringValue(n, path); ok {
			m.Any = []string{s}
		}
		return
	case yaml.MappingNode:
		keys, values := d.mappingPairs(n, path)
		m.Any = []string{}
		for i, k := range keys {
			fp := keyPath(path, k)
			if k != "any" {
				d.add(fp, "unknown field (a matcher is a glob string or {any: [globs]})")
				continue
			}
			d.decode(values[i], fp, reflect.ValueOf(&m.Any).Elem(), 1)
		}
		return
	}
	d.add(path, "must be a glob string or {any: [globs]}, not %s", describe(n))
}

func (d *decoder) anyValue(n *yaml.Node, path string, depth int) (any, bool) {
	if n = d.resolve(n); n == nil {
		return nil, false
	}
	if depth > maxNesting {
		d.add(path, "nested more than %d levels deep", maxNesting)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		keys, values := d.mappingPairs(n, path)
		for i, k := range keys {
			if v, ok := d.anyValue(values[i], keyPath(path, k), depth+1); ok {
				m[k] = v
			}
		}
		return m, true
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			if v, ok := d.anyValue(c, indexPath(path, i), depth+1); ok {
				s = append(s, v)
			}
		}
		return s, true
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!str", "!!timestamp":
			return n.Value, true
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, true
			}
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) {
				return f, true
			}
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
			d.add(path, "must be a finite number")
			return nil, false
		}
	}
	d.add(path, "unsupported value %s", describe(n))
	return nil, false
}
