package arch

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The size budgets. A file or function past them is one a newcomer cannot
// hold in their head: split it by concern. The proxy's root package keeps
// the judging and the Agent (its HTTP engine and MCP reading live in
// packages of their own), and the CLI only maps flags to the components'
// configurations.
const (
	maxFileLines     = 800
	maxFuncLines     = 150
	maxDataplaneRoot = 3000
	// maxCmd is issue 35's budget for the CLI (4,967 lines when it was
	// met): what is left is mostly help text, flag definitions and their
	// mapping to the components' Config. Logic goes to the packages;
	// never raise it.
	maxCmd = 5000
)

// source is one hand-written, non-test Go file of a product package.
type source struct {
	path  string // relative to the module's root
	lines int
	data  []byte
}

// sources reads every hand-written, non-test Go file of the product's
// packages, whatever its build constraints.
func sources(t *testing.T) []source {
	t.Helper()
	base := root(t)
	var out []source
	for _, p := range products(t) {
		files, err := filepath.Glob(filepath.Join(p.Dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if generated(data) {
				continue
			}
			r, _ := filepath.Rel(base, f)
			out = append(out, source{path: filepath.ToSlash(r), lines: bytes.Count(data, []byte("\n")), data: data})
		}
	}
	return out
}

// generated reports whether a file carries Go's generated-code marker.
func generated(data []byte) bool {
	for line := range bytes.Lines(data) {
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.HasSuffix(bytes.TrimSpace(line), []byte("DO NOT EDIT.")) {
			return true
		}
		if bytes.HasPrefix(line, []byte("package ")) {
			return false
		}
	}
	return false
}

func TestSizes(t *testing.T) {
	var dataplaneRoot, cmd int
	for _, f := range sources(t) {
		if f.lines > maxFileLines {
			t.Errorf("%s: %d lines, more than %d: split it by concern", f.path, f.lines, maxFileLines)
		}
		if filepath.Dir(f.path) == "dataplane" {
			dataplaneRoot += f.lines
		}
		if strings.HasPrefix(f.path, "cmd/") {
			cmd += f.lines
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f.path, f.data, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: func %s is %d lines, more than %d", f.path, funcName(fn), n, maxFuncLines)
			}
		}
	}
	if dataplaneRoot > maxDataplaneRoot {
		t.Errorf("dataplane's root package is %d lines, more than %d: it keeps the judging and the Agent", dataplaneRoot, maxDataplaneRoot)
	}
	if cmd > maxCmd {
		t.Errorf("cmd/ is %d lines, more than %d: the CLI maps flags and environment to the components' Config", cmd, maxCmd)
	}
	t.Logf("dataplane root %d lines, cmd/ %d lines", dataplaneRoot, cmd)
}

// funcName is fn's name with its receiver's type.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
