package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// deployInvocations are the portcullis command lines of deploy/ and of
// the page that explains it, each with where it was found: the compose
// example's services (a portcullis image's command; the portcullis lines
// of a shell service's script), the Kubernetes manifests' containers
// (likewise) and docs/isolation.md's and deploy/README.md's shell blocks.
func deployInvocations(t *testing.T) map[string][][]string {
	t.Helper()
	out := map[string][][]string{}
	// The compose example: which Dockerfile targets run portcullis itself
	// (ENTRYPOINT portcullis) and which a shell script (sh -c).
	var c struct {
		Services map[string]struct {
			Build      any      `yaml:"build"`
			Image      string   `yaml:"image"`
			Entrypoint []string `yaml:"entrypoint"`
			Command    []string `yaml:"command"`
		} `yaml:"services"`
	}
	data, err := os.ReadFile("../../deploy/compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	for name, s := range c.Services {
		where := "deploy/compose service " + name
		if s.Build == nil || s.Entrypoint != nil {
			continue // an image of its own: no portcullis in it
		}
		target, _ := s.Build.(map[string]any)["target"].(string)
		switch target {
		case "", "proxy":
			out[where] = append(out[where], s.Command)
		case "tools", "netinit":
			out[where] = append(out[where], scriptInvocations(strings.Join(s.Command, "\n"))...)
		default:
			t.Errorf("%s: build target %q: which entrypoint?", where, target)
		}
	}

	// The Kubernetes manifests: portcullis-proxy images run portcullis,
	// portcullis-netinit images a shell script.
	manifests, _ := filepath.Glob("../../deploy/kubernetes/*.yaml")
	for _, f := range manifests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				Spec struct {
					Template struct {
						Spec struct {
							InitContainers []k8sContainer `yaml:"initContainers"`
							Containers     []k8sContainer `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			pod := doc.Spec.Template.Spec
			for _, k := range append(pod.InitContainers, pod.Containers...) {
				where := filepath.Base(f) + " container " + k.Name
				switch {
				case strings.HasPrefix(k.Image, "portcullis-proxy:") && k.Command == nil:
					out[where] = append(out[where], k.Args)
				case strings.HasPrefix(k.Image, "portcullis-netinit:") && k.Command == nil:
					out[where] = append(out[where], scriptInvocations(strings.Join(k.Args, "\n"))...)
				case strings.HasPrefix(k.Image, "portcullis"):
					t.Errorf("%s: image %s with command %q: which entrypoint?", where, k.Image, k.Command)
				}
			}
		}
	}

	// The docs' shell blocks.
	for _, doc := range []string{"../../docs/isolation.md", "../../deploy/README.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
			where := filepath.Base(doc) + " block " + strconv.Itoa(i+1)
			script := strings.ReplaceAll(block[1], "\\\n", " ")
			script = regexp.MustCompile(`(?m)^\s*sudo\s+`).ReplaceAllString(script, "")
			out[where] = append(out[where], scriptInvocations(script)...)
		}
	}
	return out
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
}

// scriptInvocations are the portcullis commands of a shell script, each
// as its arguments, cut at pipes, lists, redirections and comments.
func scriptInvocations(script string) [][]string {
	var out [][]string
	for _, line := range strings.Split(script, "\n") {
		for _, part := range regexp.MustCompile(`\|\||&&|;|\|`).Split(line, -1) {
			f := strings.Fields(part)
			if len(f) == 0 || f[0] != "portcullis" {
				continue
			}
			args := f[1:]
			for i, a := range args {
				if strings.HasPrefix(a, ">") || strings.HasPrefix(a, "#") || a == "&" {
					args = args[:i]
					break
				}
			}
			out = append(out, args)
		}
	}
	return out
}

// TestDeployCommands: every portcullis command deploy/ runs, and every one
// its docs show, is one the CLI takes, flags and all — a flag that does
// not exist (or a value its type refuses) fails here, not in a cluster.
func TestDeployCommands(t *testing.T) {
	seen := map[string]bool{}
	for where, lines := range deployInvocations(t) {
		for _, args := range lines {
			t.Run(where, func(t *testing.T) { checkArgs(t, args) })
			if len(args) > 0 {
				seen[args[0]] = true
			}
		}
	}
	// What the deployments rest on is among what was checked.
	for _, cmd := range []string{"proxy", "run"} {
		if !seen[cmd] {
			t.Errorf("no portcullis %s command found in deploy/ or its docs: the extraction missed them", cmd)
		}
	}
}
