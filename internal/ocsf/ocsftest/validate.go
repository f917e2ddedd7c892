// Package ocsftest checks OCSF events against the class definitions of
// the OCSF schema (version ocsf.Version) vendored in schema/, with the
// OCSF licence: required attributes, the class, category and type
// numbers, enum values, attribute types and at_least_one constraints,
// into every nested object. Tests only.
package ocsftest

import (
	"embed"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

//go:embed all:schema
var files embed.FS

type attr struct {
	Requirement string                     `json:"requirement"`
	Enum        map[string]json.RawMessage `json:"enum"`
	Type        string                     `json:"type"`
	IsArray     bool                       `json:"is_array"`
}

type def struct {
	Name        string          `json:"name"`
	UID         int             `json:"uid"`
	Category    string          `json:"category"`
	Extends     string          `json:"extends"`
	Attributes  json.RawMessage `json:"attributes"`
	Constraints struct {
		AtLeastOne []string `json:"at_least_one"`
		JustOne    []string `json:"just_one"`
	} `json:"constraints"`
}

// resolved is a class or object with its inherited attributes merged.
type resolved struct {
	name       string
	uid        int
	category   string
	attrs      map[string]attr
	atLeastOne [][]string
}

type schema struct {
	version    string
	dict       map[string]attr
	categories map[string]int
	classes    map[int]*resolved // by class_uid
	objects    map[string]*resolved
}

var (
	once   sync.Once
	loaded *schema
	errLd  error
)

func read(name string, v any) error {
	b, err := files.ReadFile(path.Join("schema", name))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// parseAttrs reads an attributes object, folding in $include'd profiles.
func parseAttrs(raw json.RawMessage) (map[string]attr, error) {
	out := map[string]attr{}
	if len(raw) == 0 {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if k == "$include" {
			var incs []string
			if err := json.Unmarshal(v, &incs); err != nil {
				return nil, err
			}
			for _, inc := range incs {
				var p def
				if err := read(inc, &p); err != nil {
					return nil, fmt.Errorf("include %s: %w", inc, err)
				}
				pa, err := parseAttrs(p.Attributes)
				if err != nil {
					return nil, err
				}
				for pk, pv := range pa {
					if _, ok := out[pk]; !ok {
						// A profile's attributes are required only of
						// events that apply it; checked as optional.
						pv.Requirement = "optional"
						out[pk] = pv
					}
				}
			}
			continue
		}
		var a attr
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		out[k] = a
	}
	return out, nil
}

func merge(parent, child map[string]attr) map[string]attr {
	out := maps.Clone(parent)
	for k, c := range child {
		p := out[k]
		if c.Requirement != "" {
			p.Requirement = c.Requirement
		}
		if c.Enum != nil {
			// A class's enum adds to its parent's (0 Unknown, 99 Other).
			enum := maps.Clone(p.Enum)
			if enum == nil {
				enum = map[string]json.RawMessage{}
			}
			maps.Copy(enum, c.Enum)
			p.Enum = enum
		}
		if c.Type != "" {
			p.Type = c.Type
		}
		out[k] = p
	}
	return out
}

func (s *schema) resolve(dir, name string, byName map[string]string) (*resolved, error) {
	file, ok := byName[name]
	if !ok {
		file = path.Join(dir, name+".json")
	}
	var d def
	if err := read(file, &d); err != nil {
		return nil, fmt.Errorf("%s %q is not vendored: %w", dir, name, err)
	}
	attrs, err := parseAttrs(d.Attributes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	r := &resolved{name: d.Name, uid: d.UID, category: d.Category, attrs: attrs}
	if d.Extends != "" {
		parent, err := s.resolve(dir, d.Extends, byName)
		if err != nil {
			return nil, err
		}
		r.attrs = merge(parent.attrs, attrs)
		if len(d.Constraints.AtLeastOne)+len(d.Constraints.JustOne) == 0 {
			// Constraints are inherited unless the child states its own.
			r.atLeastOne = slices.Clone(parent.atLeastOne)
		}
		if r.category == "" {
			r.category = parent.category
		}
	}
	if len(d.Constraints.AtLeastOne) > 0 {
		r.atLeastOne = append(r.atLeastOne, d.Constraints.AtLeastOne)
	}
	if len(d.Constraints.JustOne) > 0 {
		r.atLeastOne = append(r.atLeastOne, d.Constraints.JustOne)
	}
	return r, nil
}

func load() (*schema, error) {
	s := &schema{classes: map[int]*resolved{}, objects: map[string]*resolved{}}
	var v struct{ Version string }
	if err := read("version.json", &v); err != nil {
		return nil, err
	}
	s.version = v.Version
	var dict struct{ Attributes map[string]attr }
	if err := read("dictionary.json", &dict); err != nil {
		return nil, err
	}
	s.dict = dict.Attributes
	var cats struct {
		Attributes map[string]struct{ UID int }
	}
	if err := read("categories.json", &cats); err != nil {
		return nil, err
	}
	s.categories = map[string]int{}
	for k, c := range cats.Attributes {
		s.categories[k] = c.UID
	}
	// Every vendored event file, by name (extends names a file's "name").
	byName := map[string]string{}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := files.ReadDir(path.Join("schema", dir))
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			if e.IsDir() {
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			var d def
			if err := read(p, &d); err != nil {
				return err
			}
			byName[d.Name] = p
		}
		return nil
	}
	if err := walk("events"); err != nil {
		return nil, err
	}
	for name := range byName {
		r, err := s.resolve("events", name, byName)
		if err != nil {
			return nil, err
		}
		if r.uid == 0 || r.category == "" {
			continue // base_event and the category parents
		}
		s.classes[s.categories[r.category]*1000+r.uid] = r
	}
	return s, nil
}

func (s *schema) object(name string) (*resolved, error) {
	if o, ok := s.objects[name]; ok {
		return o, nil
	}
	o, err := s.resolve("objects", name, nil)
	if err != nil {
		return nil, err
	}
	s.objects[name] = o
	return o, nil
}

var mu sync.Mutex

// Version returns the vendored schema's version.
func Version() (string, error) {
	once.Do(func() { loaded, errLd = load() })
	if errLd != nil {
		return "", errLd
	}
	return loaded.version, nil
}

// Validate checks one event, a JSON object, against its class. The
// error lists every problem found.
func Validate(event []byte) error {
	once.Do(func() { loaded, errLd = load() })
	if errLd != nil {
		return errLd
	}
	mu.Lock()
	defer mu.Unlock()
	var ev map[string]any
	dec := json.NewDecoder(strings.NewReader(string(event)))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	s := loaded
	v := &validator{s: s}
	classUID, ok := intOf(ev["class_uid"])
	if !ok {
		return fmt.Errorf("class_uid missing or not an integer")
	}
	cls, ok := s.classes[int(classUID)]
	if !ok {
		return fmt.Errorf("class_uid %d: no vendored class", classUID)
	}
	if cat, _ := intOf(ev["category_uid"]); int(cat) != s.categories[cls.category] {
		v.errf("category_uid %v, want %d (%s)", ev["category_uid"], s.categories[cls.category], cls.category)
	}
	act, _ := intOf(ev["activity_id"])
	if typ, _ := intOf(ev["type_uid"]); typ != classUID*100+act {
		v.errf("type_uid %v, want class_uid*100+activity_id = %d", ev["type_uid"], classUID*100+act)
	}
	if md, ok := ev["metadata"].(map[string]any); !ok || md["version"] != s.version {
		v.errf("metadata.version %v, want %s", md["version"], s.version)
	}
	v.check(cls.name, cls, ev)
	if len(v.errs) > 0 {
		return fmt.Errorf("%s (class %d): %s", cls.name, classUID, strings.Join(v.errs, "; "))
	}
	return nil
}

type validator struct {
	s    *schema
	errs []string
}

func (v *validator) errf(format string, args ...any) {
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

func intOf(x any) (int64, bool) {
	n, ok := x.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

// check validates obj against r's attributes, at path at.
func (v *validator) check(at string, r *resolved, obj map[string]any) {
	for name, a := range r.attrs {
		if a.Requirement == "required" {
			if _, ok := obj[name]; !ok {
				v.errf("%s.%s is required", at, name)
			}
		}
	}
	for _, set := range r.atLeastOne {
		if !slices.ContainsFunc(set, func(k string) bool { _, ok := obj[k]; return ok }) {
			v.errf("%s: at least one of %v", at, set)
		}
	}
	for name, val := range obj {
		a, ok := r.attrs[name]
		if !ok {
			v.errf("%s.%s is not an attribute of %s", at, name, r.name)
			continue
		}
		d := v.s.dict[name]
		typ := a.Type
		if typ == "" {
			typ = d.Type
		}
		enum := a.Enum
		switch {
		case enum == nil:
			enum = d.Enum
		case d.Enum != nil:
			// A class's enum extends the dictionary's (Remediation
			// Activity's status_id adds 3-6 to 0, 1, 2 and 99), as the
			// OCSF server merges them.
			enum = maps.Clone(d.Enum)
			maps.Copy(enum, a.Enum)
		}
		if name == "class_uid" || name == "category_uid" || name == "type_uid" {
			enum = nil // checked against the class by Validate
		}
		p := at + "." + name
		if d.IsArray {
			arr, ok := val.([]any)
			if !ok {
				v.errf("%s: want an array", p)
				continue
			}
			for i, x := range arr {
				v.value(fmt.Sprintf("%s[%d]", p, i), typ, enum, x)
			}
			continue
		}
		v.value(p, typ, enum, val)
	}
}

func (v *validator) value(p, typ string, enum map[string]json.RawMessage, val any) {
	switch typ {
	case "json_t", "":
		return
	case "boolean_t":
		if _, ok := val.(bool); !ok {
			v.errf("%s: want a boolean", p)
		}
	case "integer_t", "long_t", "port_t", "timestamp_t":
		n, ok := intOf(val)
		if !ok {
			v.errf("%s: want an integer, got %v", p, val)
			return
		}
		if enum != nil {
			if _, ok := enum[strconv.FormatInt(n, 10)]; !ok {
				v.errf("%s: %d is not in its enum", p, n)
			}
		}
	case "float_t":
		if _, ok := val.(json.Number); !ok {
			v.errf("%s: want a number", p)
		}
	case "object":
		if _, ok := val.(map[string]any); !ok {
			v.errf("%s: want an object", p)
		}
	default:
		if strings.HasSuffix(typ, "_t") {
			if _, ok := val.(string); !ok {
				v.errf("%s: want a string (%s)", p, typ)
			}
			return
		}
		obj, ok := val.(map[string]any)
		if !ok {
			v.errf("%s: want a %s object", p, typ)
			return
		}
		o, err := v.s.object(typ)
		if err != nil {
			v.errf("%s: %v", p, err)
			return
		}
		v.check(p, o, obj)
	}
}
