package arch

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writers may open write transactions and call the store's writing
// methods: the store itself (its record-keeping and drivers), lifecycle,
// the one writer the rest of the gateway goes through, and the test
// support that fills a store for a test.
func writer(path string) bool {
	switch r := rel(path); {
	case r == "store", strings.HasPrefix(r, "store/"), r == "lifecycle":
		return true
	case r == "gateway/gatewaytest", r == "internal/pgtest":
		return true
	}
	return false
}

// notWrites are the methods outside the store's Reader that change no
// stored state.
var notWrites = map[string]bool{"Close": true}

// TestWritesOnlyInLifecycle type-checks every product package but the
// writers and fails on any use of a method of the store (or a driver)
// that is not in store.Reader, and of the functions that write in a
// transaction (store.Transact, store.Audit, store.AppendVersion). The
// gateway's handlers, distribution, the Sentry intake and notify hold a
// store.Reader, so such a call does not compile there; this also catches
// a package that holds a *store.Store it was handed.
func TestWritesOnlyInLifecycle(t *testing.T) {
	all := goList(t, "-export", "-deps", "./...")
	exports := map[string]string{}
	for _, p := range all {
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	st, err := imp.Import(abs("store"))
	if err != nil {
		t.Fatal(err)
	}
	writes := writeMethods(t, st)
	checked := 0
	for _, p := range all {
		if !p.ours() || exempt(p.ImportPath) || writer(p.ImportPath) || len(p.GoFiles) == 0 {
			continue
		}
		checked++
		for _, use := range storeWrites(t, fset, imp, p, writes) {
			t.Errorf("%s: %s writes to the store outside lifecycle: hold a store.Reader and write through lifecycle", use.pos, use.name)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages: the module's packages were not found", checked)
	}
}

// writeMethods returns the names of the store's methods that write: those
// of Driver and *Store that Reader does not have, and the functions a
// write transaction is made of.
func writeMethods(t *testing.T, st *types.Package) map[string]bool {
	t.Helper()
	lookup := func(name string) types.Type {
		obj := st.Scope().Lookup(name)
		if obj == nil {
			t.Fatalf("store.%s not found", name)
		}
		return obj.Type()
	}
	reads := map[string]bool{}
	ms := types.NewMethodSet(lookup("Reader"))
	for i := range ms.Len() {
		reads[ms.At(i).Obj().Name()] = true
	}
	writes := map[string]bool{"Transact": true, "Audit": true, "AppendVersion": true}
	for _, typ := range []types.Type{lookup("Driver"), types.NewPointer(lookup("Store"))} {
		ms := types.NewMethodSet(typ)
		for i := range ms.Len() {
			if name := ms.At(i).Obj().Name(); !reads[name] && !notWrites[name] {
				writes[name] = true
			}
		}
	}
	if !writes["InTx"] || !writes["InsertAudit"] || writes["GetSandbox"] {
		t.Fatalf("write methods misread: %v", keys(writes))
	}
	return writes
}

type use struct{ pos, name string }

// storeWrites type-checks p and returns its uses of the store's writes.
func storeWrites(t *testing.T, fset *token.FileSet, imp types.Importer, p pkg, writes map[string]bool) []use {
	t.Helper()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		t.Fatalf("type-checking %s: %v", p.ImportPath, err)
	}
	var out []use
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() == nil || !writes[fn.Name()] {
			continue
		}
		if path := rel(fn.Pkg().Path()); path != "store" && !strings.HasPrefix(path, "store/") {
			continue
		}
		isMethod := fn.Type().(*types.Signature).Recv() != nil
		if isMethod || fn.Name() == "Transact" || fn.Name() == "Audit" || fn.Name() == "AppendVersion" {
			out = append(out, use{pos: fset.Position(id.Pos()).String(), name: strings.ReplaceAll(fn.FullName(), module+"/", "")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pos < out[j].pos })
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
