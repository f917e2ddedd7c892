// Package ocsftest checks OCSF events against the class definitions of
// the OCSF schema (version ocsf.Version) vendored in schema/, with the
// OCSF licence: required attributes, the class, category and type
// numbers, enum values, attribute types and at_least_one constraints,
// into every nested object. Tests only.
//
// Profiles are honoured as OCSF's own validator (ocsf-server's
// validator2, over the schema as ocsf-schema-compiler compiles it) does:
// an attribute a profile brings into a class or object (the profile's
// $include, kept when the class or a child redefines the attribute
// unless it says "profile": null) is an attribute of the event only when
// metadata.profiles declares that profile, at every depth; metadata.profiles
// must name known profiles. observables must name an attribute the event
// may carry (with [] or [n] for arrays), and, beyond what OCSF's validator
// checks, their type_id must be the observable type of that attribute
// (dictionary types such as hostname_t 1, ip_t 2, username_t 4, and
// attributes and objects with their own) and their value the attribute's
// value where the name leads to one string.
//
// Check also returns the warnings OCSF's validator gives about enum
// siblings (a string sibling that is not its value's caption; "Other"
// under 99), which Validate ignores.
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
	Observable  int                        `json:"observable"`
	// Sibling names an enum attribute's string twin (activity_id's
	// activity_name), in the dictionary.
	Sibling string `json:"sibling"`
	// profiles gates the attribute: when non-empty, an event may carry it
	// only if metadata.profiles names one of them. gated says the
	// definition decided (a profile's include, or "profile" in the file:
	// null clears, a name sets); an attribute that does not decide keeps
	// what it overrides, as ocsf-schema-compiler merges them.
	profiles []string
	gated    bool
}

// mergeProfiles applies src's profile gate on top of dst's.
func mergeProfiles(dst *attr, src attr) {
	switch {
	case !src.gated:
	case src.profiles == nil:
		dst.profiles, dst.gated = nil, true
	default:
		ps := slices.Clone(dst.profiles)
		for _, p := range src.profiles {
			if !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
		slices.Sort(ps)
		dst.profiles, dst.gated = ps, true
	}
}

type def struct {
	Name        string          `json:"name"`
	Caption     string          `json:"caption"`
	Meta        string          `json:"meta"`
	Observable  int             `json:"observable"`
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
	caption    string
	uid        int
	category   string
	observable int // the object's observable type_id, 0 if none
	attrs      map[string]attr
	atLeastOne [][]string
}

type schema struct {
	version    string
	dict       map[string]attr
	types      map[string]attr // dictionary types (hostname_t …)
	categories map[string]int
	classes    map[int]*resolved // by class_uid
	objects    map[string]*resolved
	profiles   map[string]bool // known profile names
	observable map[string]bool // observable type_ids the vendored schema defines
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

// parseAttrs reads an attributes object, folding in $include'd profiles:
// each profile's attributes are gated by it, and the object's own
// definitions merge on top (ocsf-schema-compiler's include).
func parseAttrs(raw json.RawMessage) (map[string]attr, error) {
	out := map[string]attr{}
	if len(raw) == 0 {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	own := map[string]attr{}
	for k, v := range m {
		if k == "$include" {
			continue
		}
		a, err := parseAttr(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		own[k] = a
	}
	var incs []string
	if v, ok := m["$include"]; ok {
		if err := json.Unmarshal(v, &incs); err != nil {
			return nil, err
		}
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
			if p.Meta == "profile" {
				pv.profiles, pv.gated = []string{p.Name}, true
			}
			if prev, ok := out[pk]; ok {
				// Two profiles bring one attribute: either declares it.
				mergeProfiles(&pv, prev)
			}
			out[pk] = pv
		}
	}
	for k, a := range own {
		inc, ok := out[k]
		if !ok {
			out[k] = a
			continue
		}
		if a.Requirement != "" {
			inc.Requirement = a.Requirement
		}
		if a.Enum != nil {
			inc.Enum = a.Enum
		}
		if a.Type != "" {
			inc.Type = a.Type
		}
		if a.Observable != 0 {
			inc.Observable = a.Observable
		}
		mergeProfiles(&inc, a)
		out[k] = inc
	}
	return out, nil
}

// parseAttr reads one attribute's definition; "profile" gates it (a name)
// or clears a gate it would inherit (null).
func parseAttr(raw json.RawMessage) (attr, error) {
	var a attr
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return a, err
	}
	if p, ok := keys["profile"]; ok {
		a.gated = true
		var name *string
		if err := json.Unmarshal(p, &name); err != nil {
			return a, fmt.Errorf("profile: %w", err)
		}
		if name != nil {
			a.profiles = []string{*name}
		}
	}
	return a, nil
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
		if c.Observable != 0 {
			p.Observable = c.Observable
		}
		mergeProfiles(&p, c)
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
	r := &resolved{name: d.Name, caption: d.Caption, uid: d.UID, category: d.Category, observable: d.Observable, attrs: attrs}
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
		if r.observable == 0 {
			r.observable = parent.observable
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
	var dict struct {
		Attributes map[string]attr
		Types      struct{ Attributes map[string]attr }
	}
	if err := read("dictionary.json", &dict); err != nil {
		return nil, err
	}
	s.dict, s.types = dict.Attributes, dict.Types.Attributes
	// observable.type_id: 0 Unknown, 99 Other, and every number a type,
	// a dictionary attribute or an object carries (the compiler's enum).
	s.observable = map[string]bool{"0": true, "99": true}
	for _, a := range s.types {
		if a.Observable != 0 {
			s.observable[strconv.Itoa(a.Observable)] = true
		}
	}
	for _, a := range s.dict {
		if a.Observable != 0 {
			s.observable[strconv.Itoa(a.Observable)] = true
		}
	}
	objs, err := files.ReadDir("schema/objects")
	if err != nil {
		return nil, err
	}
	for _, f := range objs {
		var d def
		if err := read(path.Join("objects", f.Name()), &d); err != nil {
			return nil, err
		}
		if d.Observable != 0 {
			s.observable[strconv.Itoa(d.Observable)] = true
		}
	}
	profs, err := files.ReadDir("schema/profiles")
	if err != nil {
		return nil, err
	}
	s.profiles = map[string]bool{}
	for _, f := range profs {
		var d def
		if err := read(path.Join("profiles", f.Name()), &d); err != nil {
			return nil, err
		}
		s.profiles[d.Name] = true
	}
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
	if name == "observable" {
		// The compiler fills observable.type_id's enum from the
		// observable numbers of types, attributes and objects.
		a := o.attrs["type_id"]
		a.Enum = map[string]json.RawMessage{}
		for id := range s.observable {
			a.Enum[id] = json.RawMessage("{}")
		}
		o.attrs["type_id"] = a
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
	_, err := Check(event)
	return err
}

// Check is Validate, and also returns the warnings OCSF's validator
// gives about enum siblings: a string sibling (activity_name, status,
// type_name, …) that is not the caption of its enum value
// (attribute_enum_sibling_incorrect; type_name's captions are the
// class's caption, ": ", and the activity's, "Other" for 99), or that is
// the caption "Other" of a 99 where the source's own word belongs
// (attribute_enum_sibling_suspicious_other).
func Check(event []byte) (warnings []string, err error) {
	once.Do(func() { loaded, errLd = load() })
	if errLd != nil {
		return nil, errLd
	}
	mu.Lock()
	defer mu.Unlock()
	var ev map[string]any
	dec := json.NewDecoder(strings.NewReader(string(event)))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	s := loaded
	v := &validator{s: s, profiles: map[string]bool{}}
	classUID, ok := intOf(ev["class_uid"])
	if !ok {
		return nil, fmt.Errorf("class_uid missing or not an integer")
	}
	cls, ok := s.classes[int(classUID)]
	if !ok {
		return nil, fmt.Errorf("class_uid %d: no vendored class", classUID)
	}
	if cat, _ := intOf(ev["category_uid"]); int(cat) != s.categories[cls.category] {
		v.errf("category_uid %v, want %d (%s)", ev["category_uid"], s.categories[cls.category], cls.category)
	}
	act, _ := intOf(ev["activity_id"])
	if typ, _ := intOf(ev["type_uid"]); typ != classUID*100+act {
		v.errf("type_uid %v, want class_uid*100+activity_id = %d", ev["type_uid"], classUID*100+act)
	}
	md, _ := ev["metadata"].(map[string]any)
	if md == nil || md["version"] != s.version {
		v.errf("metadata.version %v, want %s", md["version"], s.version)
	}
	if ps, ok := md["profiles"].([]any); ok {
		for i, p := range ps {
			name, _ := p.(string)
			if !s.profiles[name] {
				v.errf("metadata.profiles[%d]: no profile is defined for %v", i, p)
				continue
			}
			v.profiles[name] = true
		}
	}
	if name, ok := ev["type_name"].(string); ok {
		acts := maps.Clone(s.dict["activity_id"].Enum)
		maps.Copy(acts, cls.attrs["activity_id"].Enum)
		if c, ok := caption(acts, strconv.FormatInt(act, 10)); ok && name != cls.caption+": "+c {
			v.warnf("%s.type_name %q does not match the caption of type_uid %d, %q", cls.name, name, classUID*100+act, cls.caption+": "+c)
		}
	}
	v.check(cls.name, cls, ev)
	v.observables(cls, ev)
	if len(v.errs) > 0 {
		return v.warns, fmt.Errorf("%s (class %d): %s", cls.name, classUID, strings.Join(v.errs, "; "))
	}
	return v.warns, nil
}

// caption is the caption of an enum's value id, if it has one.
func caption(enum map[string]json.RawMessage, id string) (string, bool) {
	var e struct{ Caption string }
	if json.Unmarshal(enum[id], &e) != nil || e.Caption == "" {
		return "", false
	}
	return e.Caption, true
}

// sibling warns, as OCSF's validator does, about the string sibling of
// the enum attribute name at path at (whose value is n), in obj.
func (v *validator) sibling(at string, obj map[string]any, name string, enum map[string]json.RawMessage, n int64) {
	sib, ok := obj[v.s.dict[name].Sibling].(string)
	if !ok {
		return
	}
	c, ok := caption(enum, strconv.FormatInt(n, 10))
	switch {
	case !ok:
	case n == 99 && sib == c:
		v.warnf("%s.%s %q is the caption of %s 99: give the source's own value", at, v.s.dict[name].Sibling, sib, name)
	case n != 99 && sib != c:
		v.warnf("%s.%s %q does not match the caption of %s %d, %q", at, v.s.dict[name].Sibling, sib, name, n, c)
	}
}

type validator struct {
	s        *schema
	profiles map[string]bool // metadata.profiles
	errs     []string
	warns    []string
}

func (v *validator) warnf(format string, args ...any) {
	v.warns = append(v.warns, fmt.Sprintf(format, args...))
}

// allowed reports whether the event may carry a: it is gated by no
// profile, or by one metadata.profiles declares.
func (v *validator) allowed(a attr) bool {
	return len(a.profiles) == 0 || slices.ContainsFunc(a.profiles, func(p string) bool { return v.profiles[p] })
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
		if a.Requirement == "required" && v.allowed(a) {
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
		if !v.allowed(a) {
			v.errf("%s.%s is an attribute of %s only with profile %s, which metadata.profiles does not declare", at, name, r.name, strings.Join(a.profiles, " or "))
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
		if n, ok := intOf(val); ok && enum != nil {
			v.sibling(at, obj, name, enum, n)
		}
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

// observables checks each observable's name against the attributes the
// event may carry (OCSF's validator), and its type_id and value against
// the attribute the name leads to.
func (v *validator) observables(cls *resolved, ev map[string]any) {
	obs, ok := ev["observables"].([]any)
	if !ok {
		return
	}
	for i, o := range obs {
		om, ok := o.(map[string]any)
		if !ok {
			continue
		}
		name, ok := om["name"].(string)
		if !ok {
			continue
		}
		at := fmt.Sprintf("observables[%d]", i)
		if tid, ok := intOf(om["type_id"]); ok && !v.s.observable[strconv.FormatInt(tid, 10)] {
			v.errf("%s.type_id: %d is not an observable type", at, tid)
		}
		want, vals, ok := v.referenced(cls, strings.Split(name, "."), ev)
		if !ok {
			v.errf("%s.name %q does not refer to an attribute of %s the event may carry", at, name, cls.name)
			continue
		}
		if tid, ok := intOf(om["type_id"]); ok && want != 0 && tid != int64(want) {
			v.errf("%s.type_id %d, but %s is observable type %d", at, tid, name, want)
		}
		if val, ok := om["value"]; ok && len(vals) > 0 && !slices.Contains(vals, val) {
			v.errf("%s.value %v is not the event's %s (%v)", at, val, name, vals)
		}
	}
}

// referenced follows an observable's name through r's attributes (gated
// by the declared profiles) and the event's data: it returns the
// attribute's observable type (its own, its type's, or its object's) and
// the values the event holds there.
func (v *validator) referenced(r *resolved, parts []string, data any) (int, []any, bool) {
	key, idx, array := parts[0], -1, false
	if i := strings.IndexByte(key, '['); i >= 0 && strings.HasSuffix(key, "]") {
		array = true
		if n, err := strconv.Atoi(key[i+1 : len(key)-1]); err == nil {
			idx = n
		}
		key = key[:i]
	}
	a, ok := r.attrs[key]
	if !ok || !v.allowed(a) {
		return 0, nil, false
	}
	d := v.s.dict[key]
	isArray := a.IsArray || d.IsArray
	if array && !isArray {
		return 0, nil, false
	}
	typ := a.Type
	if typ == "" {
		typ = d.Type
	}
	// The values at this step: every element of an array unless [n].
	var vals []any
	if m, ok := data.(map[string]any); ok {
		if x, ok := m[key]; ok {
			if arr, ok := x.([]any); ok && isArray {
				if idx >= 0 && idx < len(arr) {
					vals = []any{arr[idx]}
				} else if idx < 0 {
					vals = arr
				}
			} else {
				vals = []any{x}
			}
		}
	}
	if len(parts) == 1 {
		obs := a.Observable
		if obs == 0 {
			obs = d.Observable
		}
		if t, ok := v.s.types[typ]; ok && obs == 0 {
			obs = t.Observable
		}
		if obs == 0 && typ != "" && !strings.HasSuffix(typ, "_t") {
			if o, err := v.s.object(typ); err == nil {
				obs = o.observable
			}
		}
		return obs, vals, true
	}
	if strings.HasSuffix(typ, "_t") || typ == "" {
		return 0, nil, false
	}
	o, err := v.s.object(typ)
	if err != nil {
		return 0, nil, false
	}
	var out []any
	var want int
	var found bool
	if len(vals) == 0 {
		vals = []any{nil}
	}
	for _, x := range vals {
		w, got, ok := v.referenced(o, parts[1:], x)
		if !ok {
			return 0, nil, false
		}
		want, found = w, true
		out = append(out, got...)
	}
	return want, out, found
}
