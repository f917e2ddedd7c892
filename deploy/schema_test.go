package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// The schemas the manifests are checked against, as published with the
// software that reads them (testdata/README.md says where each comes from):
//   - testdata/kubernetes-openapi.json: the kinds deploy/kubernetes may use
//     and every schema they reference, from the OpenAPI v3 documents of
//     Kubernetes' own repository (api/openapi-spec/v3), descriptions cut;
//   - testdata/compose-spec.json: the Compose Specification's JSON Schema
//     as compose-go (docker compose's loader) embeds it, unchanged.
const (
	kubernetesSchemas = "testdata/kubernetes-openapi.json"
	composeSchema     = "testdata/compose-spec.json"
)

// kubernetesSpecDir regenerates testdata/kubernetes-openapi.json from a
// Kubernetes module's api/openapi-spec/v3 (see testdata/README.md).
var kubernetesSpecDir = flag.String("kubernetes-openapi", "", "regenerate "+kubernetesSchemas+" from this api/openapi-spec/v3 directory")

// kubernetesKinds are the kinds deploy/kubernetes may use: the extract
// holds these and what they reference. Add a kind here (and regenerate)
// before a manifest uses it.
var kubernetesKinds = map[string][]string{
	"api__v1_openapi.json":                     {"Pod", "ServiceAccount", "Secret", "ConfigMap", "Service", "Namespace"},
	"apis__apps__v1_openapi.json":              {"Deployment", "StatefulSet", "DaemonSet"},
	"apis__networking.k8s.io__v1_openapi.json": {"NetworkPolicy"},
}

// TestExtractKubernetesSchemas writes testdata/kubernetes-openapi.json when
// run with -kubernetes-openapi DIR; otherwise it is skipped.
func TestExtractKubernetesSchemas(t *testing.T) {
	if *kubernetesSpecDir == "" {
		t.Skip("no -kubernetes-openapi: " + kubernetesSchemas + " is kept as committed")
	}
	out := map[string]any{}
	for file, kinds := range kubernetesKinds {
		data, err := os.ReadFile(filepath.Join(*kubernetesSpecDir, file))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var todo []string
		for name, s := range doc.Components.Schemas {
			for _, gvk := range groupVersionKinds(s) {
				if slices.Contains(kinds, gvk[2]) {
					todo = append(todo, name)
				}
			}
		}
		if len(todo) != len(kinds) {
			t.Fatalf("%s: kinds %v found as %v", file, kinds, todo)
		}
		for len(todo) > 0 {
			name := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			s, ok := doc.Components.Schemas[name]
			if !ok {
				t.Fatalf("%s: no schema %s", file, name)
			}
			s = withoutDescriptions(s)
			if prev, ok := out[name]; ok {
				if a, b := mustJSON(t, prev), mustJSON(t, s); !bytes.Equal(a, b) {
					t.Fatalf("%s: schema %s differs from another file's", file, name)
				}
				continue
			}
			out[name] = s
			for _, ref := range refs(s) {
				if _, done := out[ref]; !done {
					todo = append(todo, ref)
				}
			}
		}
	}
	data, err := json.MarshalIndent(map[string]any{"components": map[string]any{"schemas": out}}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubernetesSchemas, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d schemas", kubernetesSchemas, len(out))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// withoutDescriptions is s without its prose (every string-valued
// "description"), which is most of its size and none of its rules.
func withoutDescriptions(s any) any {
	switch v := s.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if _, prose := e.(string); prose && k == "description" {
				continue
			}
			out[k] = withoutDescriptions(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = withoutDescriptions(e)
		}
		return out
	}
	return s
}

var schemaRef = regexp.MustCompile(`^#/components/schemas/(.+)$`)

// refs are the component schemas s refers to.
func refs(s any) []string {
	var out []string
	switch v := s.(type) {
	case map[string]any:
		if r, ok := v["$ref"].(string); ok {
			if m := schemaRef.FindStringSubmatch(r); m != nil {
				out = append(out, m[1])
			}
		}
		for _, e := range v {
			out = append(out, refs(e)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, refs(e)...)
		}
	}
	return out
}

// groupVersionKinds reads a schema's x-kubernetes-group-version-kind as
// (group, version, kind) triples.
func groupVersionKinds(s any) [][3]string {
	m, _ := s.(map[string]any)
	list, _ := m["x-kubernetes-group-version-kind"].([]any)
	var out [][3]string
	for _, e := range list {
		g, _ := e.(map[string]any)
		group, _ := g["group"].(string)
		version, _ := g["version"].(string)
		kind, _ := g["kind"].(string)
		out = append(out, [3]string{group, version, kind})
	}
	return out
}

// kubernetes validates manifests: one compiled schema per apiVersion and
// kind, strict as `kubectl apply --validate=strict` and kubeconform
// -strict are (an object's fields are the schema's and no others).
type kubernetes struct {
	schemas map[string]*jsonschema.Schema // by "apiVersion kind"
}

var (
	kubernetesOnce sync.Once
	kubernetesVal  *kubernetes
	kubernetesErr  error
)

// loadKubernetes compiles the schemas once for all the tests (none
// changes them).
func loadKubernetes(t *testing.T) *kubernetes {
	t.Helper()
	kubernetesOnce.Do(func() { kubernetesVal, kubernetesErr = compileKubernetes() })
	if kubernetesErr != nil {
		t.Fatal(kubernetesErr)
	}
	return kubernetesVal
}

func compileKubernetes() (*kubernetes, error) {
	raw, err := os.ReadFile(kubernetesSchemas)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	components := doc.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)
	for _, s := range components {
		closeObjects(s)
	}
	c := jsonschema.NewCompiler()
	// OpenAPI 3.0's schema objects read as JSON Schema; 2020-12 honours
	// the keywords beside a $ref, as OpenAPI does.
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "file:///kubernetes-openapi.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	k := &kubernetes{schemas: map[string]*jsonschema.Schema{}}
	for _, name := range slices.Sorted(maps.Keys(components)) {
		for _, gvk := range groupVersionKinds(components[name]) {
			apiVersion := gvk[1]
			if gvk[0] != "" {
				apiVersion = gvk[0] + "/" + gvk[1]
			}
			s, err := c.Compile(url + "#/components/schemas/" + name)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			k.schemas[apiVersion+" "+gvk[2]] = s
		}
	}
	return k, nil
}

// closeObjects makes every object schema that lists its properties refuse
// any other (unless it keeps unknown fields, as x-kubernetes-preserve-
// unknown-fields says): the API server's strict field validation.
func closeObjects(s any) {
	switch v := s.(type) {
	case map[string]any:
		_, props := v["properties"]
		_, extra := v["additionalProperties"]
		_, preserve := v["x-kubernetes-preserve-unknown-fields"]
		if props && !extra && !preserve {
			v["additionalProperties"] = false
		}
		for _, e := range v {
			closeObjects(e)
		}
	case []any:
		for _, e := range v {
			closeObjects(e)
		}
	}
}

// validate checks one manifest (a decoded YAML document).
func (k *kubernetes) validate(obj any) error {
	m, ok := obj.(map[string]any)
	if !ok {
		return fmt.Errorf("not an object: %T", obj)
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	s, ok := k.schemas[apiVersion+" "+kind]
	if !ok {
		return fmt.Errorf("apiVersion %q kind %q: no such kind in the schemas (%s)", apiVersion, kind, kubernetesSchemas)
	}
	return validateJSON(s, obj)
}

// validateJSON validates v as JSON: the YAML decoder's values become
// what a JSON reader would have made of the same document.
func validateJSON(s *jsonschema.Schema, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// loadCompose compiles the Compose Specification's schema.
func loadCompose(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile(composeSchema)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "file:///compose-spec.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlDocs decodes every document of a YAML file, refusing what a YAML
// 1.1 reader (Kubernetes' and docker compose's) would read otherwise than
// this 1.2 one: an unquoted yes, no, on, off, y or n is a boolean there.
func yamlDocs(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []any
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := yaml11Booleans(&n); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var v any
		if err := n.Decode(&v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
}

var yaml11Bool = regexp.MustCompile(`^(?i:y|yes|n|no|on|off)$`)

func yaml11Booleans(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Style == 0 && n.Tag == "!!str" && yaml11Bool.MatchString(n.Value) {
		return fmt.Errorf("line %d: %s is a boolean to a YAML 1.1 reader: quote it", n.Line, n.Value)
	}
	for _, c := range n.Content {
		if err := yaml11Booleans(c); err != nil {
			return err
		}
	}
	return nil
}

// errorText is err's message on one line, for matching.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
