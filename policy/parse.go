package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/portcullis-dev/portcullis/internal/spelling"
)

// Limits on documents handed to Parse. They bound the work an untrusted
// document can cause; real policies are a few kilobytes.
const (
	// MaxDocumentBytes is the largest document Parse accepts.
	MaxDocumentBytes = 4 << 20
	// maxNesting bounds the depth of free-form values (middleware config,
	// arguments_schema); the policy structure itself is shallow.
	maxNesting = 64
	// maxNodes bounds the nodes visited, so YAML aliases cannot multiply
	// the work ("billion laughs").
	maxNodes = 1 << 18
	// maxProblems bounds the problems reported, of each kind; a document
	// with more is not worth reading further.
	maxProblems = 200
)

// Problem is one finding about a document: an error or a warning, with the
// field path it concerns (`network_policies.orders.endpoints[0].port`). The
// path is empty for problems about the document as a whole, such as a YAML
// syntax error.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	// Code classifies problems that tools act on; empty for most.
	Code string `json:"code,omitempty"`
}

// CodeCloudMetadata marks a problem that names a cloud metadata address:
// the gateway refuses such a policy, and `portcullis prove` reports it as
// a cloud_metadata finding.
const CodeCloudMetadata = "cloud_metadata"

// CodePrivateResolution marks the one note per document that exact
// hostnames without allowed_ips are denied when they resolve to a private
// address (a divergence from OpenShell). It is about the whole document,
// so the gateway shows it only when a sandbox's policy did not have it
// already.
const CodePrivateResolution = "private_resolution"

// String returns "path: message", or the message alone when there is no path.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError is the error of Parse and Validate: every problem found in
// the document, not just the first. Its messages are safe to show to the
// author of the document.
type ValidationError struct {
	Problems []Problem
}

// Error lists every problem as "path: message", joined by "; ".
func (e *ValidationError) Error() string {
	if e == nil || len(e.Problems) == 0 {
		return "invalid policy"
	}
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// Parse decodes a policy document, YAML or JSON, strictly, validates it and
// returns it in canonical form together with any warnings. Unknown fields,
// values of the wrong type, duplicate keys and every validation rule are
// reported together in a *ValidationError, each with its field path. On
// error the policy is nil; warnings are returned either way.
func Parse(data []byte) (*Policy, []Problem, error) {
	p, decodeProblems := decodeDocument(data)
	if p == nil {
		return nil, nil, &ValidationError{Problems: decodeProblems}
	}
	v := &validator{}
	v.policy(p)
	problems := decodeProblems
	// A value with the wrong type was left zero; don't also report it as
	// missing.
	reported := make(map[string]bool, len(decodeProblems))
	for _, pr := range decodeProblems {
		reported[pr.Path] = true
	}
	for _, pr := range v.errs {
		if !reported[pr.Path] {
			problems = appendProblem(problems, pr)
		}
	}
	if len(problems) > 0 {
		return nil, v.warns, &ValidationError{Problems: problems}
	}
	return p.Canonical(), v.warns, nil
}

// decodeDocument turns data into a Policy, collecting every decoding
// problem. It returns a nil policy only when the document cannot be read at
// all (size, encoding, syntax, not a mapping).
func decodeDocument(data []byte) (*Policy, []Problem) {
	p := new(Policy)
	readable, problems := DecodeStrict(data, p, "document", MaxDocumentBytes)
	if !readable {
		return nil, problems
	}
	lowerProtocols(p)
	return p, problems
}

// lowerProtocols lower-cases every endpoint's protocol: OpenShell parses
// protocol names case-insensitively (`protocol: REST`), and the canonical
// form, so the hash, spells them in lower case.
func lowerProtocols(p *Policy) {
	for _, np := range p.NetworkPolicies {
		if np == nil {
			continue
		}
		for _, ep := range np.Endpoints {
			if ep != nil {
				ep.Protocol = strings.ToLower(ep.Protocol)
			}
		}
	}
}

// DecodeStrict decodes YAML or JSON data into v (a pointer to a struct
// with yaml tags, which may hold this package's types) the way Parse reads
// a policy: unknown fields, duplicate keys and values of the wrong type
// are each reported with their field path, decoding carries on so every
// problem is reported at once, and nesting and size are bounded. what
// names the input in messages ("proposal"). readable is false when the
// input could not be read at all (size, encoding, syntax); v is then
// untouched.
func DecodeStrict(data []byte, v any, what string, maxBytes int) (readable bool, problems []Problem) {
	fail := func(format string, args ...any) (bool, []Problem) {
		return false, []Problem{{Message: fmt.Sprintf(format, args...)}}
	}
	if len(data) > maxBytes {
		return fail("%s is %d bytes; the limit is %d", what, len(data), maxBytes)
	}
	if !utf8.Valid(data) {
		return fail("%s is not valid UTF-8", what)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fail("%s is empty", what)
	}
	var root *yaml.Node
	var err error
	if json.Valid(data) {
		root, err = jsonToNode(data)
	} else {
		root, err = yamlToNode(data)
	}
	if err != nil {
		return fail("%s", err.Error())
	}
	d := &decoder{}
	defer func() {
		// The decoder works on untrusted input: a bug must become a
		// problem report, not a crash of the gateway.
		if r := recover(); r != nil {
			readable, problems = fail("internal error decoding %s: %v", what, r)
		}
	}()
	d.decode(root, "", reflect.ValueOf(v).Elem(), 0)
	return true, d.problems
}

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

// jsonToNode converts a valid JSON document into the yaml.Node tree the
// decoder walks, keeping duplicate keys so that they can be reported (YAML
// parsing of JSON would do the same, but JSON has its own, stricter,
// grammar: tabs, escapes).
func jsonToNode(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value func() (*yaml.Node, error)
	value = func() (*yaml.Node, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case json.Delim:
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
				_, err := dec.Token() // '}'
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
				_, err := dec.Token() // ']'
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

// decoder walks a yaml.Node tree into Go values by their yaml struct tags,
// recording a Problem (with its path) for every unknown field, duplicate key
// and value of the wrong type, and carrying on.
type decoder struct {
	problems []Problem
	nodes    int
	stopped  bool
}

func (d *decoder) add(path, format string, args ...any) {
	d.problems = appendProblem(d.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// appendProblem appends p unless the list is full, in which case it ends
// the list with a note once.
func appendProblem(ps []Problem, p Problem) []Problem {
	switch {
	case len(ps) < maxProblems:
		return append(ps, p)
	case len(ps) == maxProblems:
		return append(ps, Problem{Message: fmt.Sprintf("more than %d problems; the rest are not shown", maxProblems)})
	}
	return ps
}

var (
	matcherType = reflect.TypeFor[Matcher]()
	timeType    = reflect.TypeFor[time.Time]()
	processType = reflect.TypeFor[Process]()
)

// positiveInts are integer fields whose zero value means "default", so an
// explicit zero (or less) in a document is a mistake worth reporting.
var positiveInts = map[string]string{
	"port":                   "must be between 1 and 65535",
	"max_body_bytes":         "must be > 0",
	"graphql_max_body_bytes": "must be > 0",
	"requests_per_minute":    "must be an integer from 1 to 1000000",
	"burst":                  "must be an integer from 1 to 1000000 (omit it for requests_per_minute)",
}

// resolve follows aliases and counts the node against the budget. It
// returns nil once the budget is spent.
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

// describe names what a node holds, for "must be X, not Y" messages.
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
// KeyPath is the field path of key under path, as problems report it:
// "a.b", or a["odd key"] for a key that is not a plain name.
func KeyPath(path, key string) string { return keyPath(path, key) }

// IndexPath is the field path of element i under path: "a[2]".
func IndexPath(path string, i int) string { return indexPath(path, i) }

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

// mappingPairs returns the key/value pairs of a mapping node, reporting
// non-scalar and duplicate keys.
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

// decode stores node n into v (an addressable value), reporting problems
// under path.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value, depth int) {
	if n = d.resolve(n); n == nil {
		return
	}
	if depth > maxNesting {
		d.add(path, "nested more than %d levels deep", maxNesting)
		return
	}
	if isNull(n) {
		return // null is "not given": the zero value
	}
	t := v.Type()
	switch {
	case t == matcherType:
		d.decodeMatcher(n, path, v.Addr().Interface().(*Matcher))
		return
	case t == timeType:
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

// fieldIndex maps yaml tag names to field indexes, per struct type. The
// fields of an embedded struct tagged `yaml:",inline"` are the outer
// struct's, as the YAML package reads them.
func fieldIndex(t reflect.Type) map[string][]int {
	m := make(map[string][]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Anonymous && f.Type.Kind() == reflect.Struct && name == "" && opts == "inline" {
			for inner, idx := range fieldIndex(f.Type) {
				m[inner] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		m[name] = []int{i}
	}
	return m
}

// didYouMean is "; did you mean \"name\"?" for the field of fields an
// unknown key is a near miss of, else "".
func didYouMean(key string, fields map[string][]int) string {
	names := slices.Sorted(maps.Keys(fields))
	if near := spelling.Nearest(key, names, nil); near != "" {
		return fmt.Sprintf("; did you mean %q?", near)
	}
	return ""
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value, depth int) {
	if n.Kind != yaml.MappingNode {
		d.add(path, "must be a mapping, not %s", describe(n))
		return
	}
	t := v.Type()
	fields := fieldIndex(t)
	keys, values := d.mappingPairs(n, path)
	for i, k := range keys {
		fp := keyPath(path, k)
		idx, ok := fields[k]
		if !ok {
			hint := ""
			if len(d.problems) < maxProblems { // past it, the problem is not shown
				hint = didYouMean(k, fields)
			}
			d.add(fp, "unknown field%s", hint)
			continue
		}
		f := v.FieldByIndex(idx)
		if t == processType {
			// run_as_user / run_as_group: a name or a numeric id, which
			// YAML authors often leave unquoted.
			if vn := d.resolve(values[i]); vn != nil && !isNull(vn) {
				if vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!int" {
					if id, ok := d.intValue(vn, fp); ok {
						f.SetString(strconv.FormatInt(id, 10))
					}
				} else if s, ok := d.stringValue(vn, fp); ok {
					f.SetString(s)
				}
			}
			continue
		}
		d.decode(values[i], fp, f, depth+1)
		if msg, ok := positiveInts[k]; ok && f.Kind() == reflect.Int {
			if vn := d.resolve(values[i]); vn != nil && vn.ShortTag() == "!!int" && f.Int() <= 0 {
				d.add(fp, "%s", msg)
			}
		}
	}
}

func (d *decoder) stringValue(n *yaml.Node, path string) (string, bool) {
	// A date-shaped plain scalar (mcp.versions: [2025-11-25]) is a string
	// to us.
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

// decodeMatcher accepts a glob string, {glob: glob} (OpenShell's
// L7QueryMatcher shape) or {any: [glob, ...]}; {glob} is folded into Any,
// so the canonical form writes it as the plain string.
func (d *decoder) decodeMatcher(n *yaml.Node, path string, m *Matcher) {
	switch n.Kind {
	case yaml.ScalarNode:
		if s, ok := d.stringValue(n, path); ok {
			m.Any = []string{s}
		}
		return
	case yaml.MappingNode:
		keys, values := d.mappingPairs(n, path)
		m.Any = []string{}
		if slices.Contains(keys, "glob") && slices.Contains(keys, "any") {
			d.add(path, "a matcher cannot set both glob and any")
			return
		}
		for i, k := range keys {
			fp := keyPath(path, k)
			switch k {
			case "any":
				d.decode(values[i], fp, reflect.ValueOf(&m.Any).Elem(), 1)
			case "glob":
				if s, ok := d.stringValue(values[i], fp); ok {
					m.Any = []string{s}
				}
			default:
				d.add(fp, "unknown field (a matcher is a glob string, {glob: glob} or {any: [globs]})")
			}
		}
		return
	}
	d.add(path, "must be a glob string, {glob: glob} or {any: [globs]}, not %s", describe(n))
}

// anyValue decodes a free-form value into the JSON data model: map[string]any,
// []any, string, bool, int64, float64 or nil.
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
