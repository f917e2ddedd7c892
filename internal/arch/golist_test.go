package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// module is the module's path; rel and abs convert package paths.
const module = "github.com/portcullis-dev/portcullis"

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

func abs(path string) string { return module + "/" + path }

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	Imports    []string
	Export     string
	Standard   bool
	Module     *struct{ Path string }
}

// ours reports whether p is one of the module's packages.
func (p pkg) ours() bool { return p.Module != nil && p.Module.Path == module }

// exempt reports whether the rules of the product do not apply to the
// package: benchmarks, drills, the conformance harnesses and generated
// code have rules of their own.
func exempt(path string) bool {
	for _, prefix := range []string{"bench/", "drills/", "conformance/", "proto/"} {
		if strings.HasPrefix(rel(path), prefix) {
			return true
		}
	}
	return false
}

// goList runs go list -json with args from the module's root.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// root is the module's directory.
func root(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			rootErr = err
			return
		}
		rootDir = filepath.Dir(strings.TrimSpace(string(out)))
	})
	if rootErr != nil {
		t.Fatalf("go env GOMOD: %v", rootErr)
	}
	return rootDir
}

// products lists the module's packages the product rules apply to.
func products(t *testing.T) []pkg {
	t.Helper()
	var out []pkg
	for _, p := range goList(t, "./...") {
		if !exempt(p.ImportPath) {
			out = append(out, p)
		}
	}
	return out
}
