package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The CUDA backend executes each node on its own (ARCHITECTURE.md rule 7):
// no field written while one node is planned or launched may carry what a
// later node reads. These tests read the package source: a vet-style check
// that needs no device.

// executeMayWrite are the Backend fields that Execute (and everything it
// calls) is allowed to write, with why that carries nothing from one node
// to the next. Every other field is load-time state: written by New,
// RegisterWeight, AllocKV, Alloc / Free, Write, the split brackets, Pin
// (around a whole forward) or Close, never while a node runs.
var executeMayWrite = map[string]string{
	"cap":            "the recording of the current split's launches, issued and cleared at its Synchronize; nodes never read it",
	"k":              "the loaded module: its launch census and op timing count launches (instrumentation), no node reads them",
	"pool":           "allocation: scratch growth takes new buffers at plan time (never inside a capture window) and moves the pool generation",
	"mm.MMQAct":      "grow-only MMQ activation scratch: each matmul writes it before it reads it",
	"mm.MMQActBytes": "its capacity",
	"ffnUp":          "grow-only fused FFN up scratch: each FFN node writes it before it reads it",
	"ffnUpLen":       "its capacity",
	"attnScratch":    "split-K decode attention scratch per shape, grow-only: each attention launch writes its partials before its combine reads them",
	"mu":             "the host-state lock against a concurrent RegisterWeight: taken and released within each call, it holds no value",
}

// loadTime are the other Backend fields: the test fails on a field in
// neither list, so a new field is classified when it is added.
var loadTime = []string{"dev", "s", "lv", "logf", "mm", "stage", "weights", "weightBytes", "reregistered", "repackBytes",
	"kvSpec", "kvK", "kvV", "kvRowB", "kvScratch", "kvStamp", "ops", "closed", "timer", "memOpen", "memTotal",
	"regWaits", "pinned", "pinnedSteps",
	"kvLen", // SetKVLength, before a run: nodes read it (the decode route by depth), none writes it
}

// TestBackendState_EveryFieldIsLoadTimeOrPerNode: every field of Backend is
// in one of the two lists above.
func TestBackendState_EveryFieldIsLoadTimeOrPerNode(t *testing.T) {
	known := map[string]bool{}
	for _, f := range loadTime {
		known[f] = true
	}
	for f := range executeMayWrite {
		known[strings.SplitN(f, ".", 2)[0]] = true
	}
	typ := reflect.TypeOf(Backend{})
	for i := range typ.NumField() {
		if name := typ.Field(i).Name; !known[name] {
			t.Errorf("Backend.%s is in neither executeMayWrite nor loadTime: say whether a node may write it, and why that carries nothing to the next node", name)
		}
	}
}

// TestBackendState_ExecuteWritesNoFieldANodeCouldCarry: the Backend fields
// written by Execute, the op handlers in the op table and everything they
// call in this package (assignments, increments, taking a field's address
// and pointer-receiver method calls on a field, closures included) are in
// executeMayWrite.
func TestBackendState_ExecuteWritesNoFieldANodeCouldCarry(t *testing.T) {
	files := parsePackage(t, ".")
	writes := executeWrites(files)
	if len(writes) == 0 {
		t.Fatal("the walk found no write at all: the checker is broken")
	}
	for _, f := range sortedKeys(writes) {
		if _, ok := executeMayWrite[f]; !ok {
			t.Errorf("Backend.%s is written while a node executes (%s): state a later node could read", f, strings.Join(writes[f], ", "))
		}
	}
}

// TestBackendState_CheckerCatchesADeferral: the walk flags a field an op
// handler leaves for the next node (the shape of the retired
// MINFER_FUSE_RESIDUAL deferral), through a helper method and a closure.
func TestBackendState_CheckerCatchesADeferral(t *testing.T) {
	const src = `package cuda
type Backend struct{ pending *int; ops map[int]opFunc }
func opTable() map[int]opFunc { return map[int]opFunc{1: opDefer} }
func (b *Backend) Execute(n int) error { return nil }
func opDefer(b *Backend, n int) (func() error, error) {
	return func() error { b.hold(n); return nil }, nil
}
func (b *Backend) hold(n int) { b.pending = &n }
`
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "planted.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(executeWrites([]*ast.File{f})); !slices.Equal(got, []string{"pending"}) {
		t.Errorf("planted deferral: writes %v, want [pending]", got)
	}
}

func parsePackage(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fs, n, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// funcKey names a declaration: "Recv.Name" for a method, "Name" otherwise.
func funcKey(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	return recvType(d.Recv.List[0].Type) + "." + d.Name.Name
}

func recvType(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// backendVars are the names a declaration binds to a *Backend: its
// receiver and its parameters of that type.
func backendVars(d *ast.FuncDecl) map[string]bool {
	vs := map[string]bool{}
	add := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			if recvType(f.Type) == "Backend" {
				for _, n := range f.Names {
					vs[n.Name] = true
				}
			}
		}
	}
	add(d.Recv)
	add(d.Type.Params)
	return vs
}

// executeWrites walks Execute and the op table's handlers through the
// package's call graph and returns each Backend field written on the way
// ("mm.MMQAct" for a field of the MatMulOptions field) with the functions
// that write it.
func executeWrites(files []*ast.File) map[string][]string {
	decls := map[string]*ast.FuncDecl{}
	ptrMethods := map[string]bool{} // method names with a pointer receiver
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			decls[funcKey(fd)] = fd
			if fd.Recv != nil {
				if _, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
					ptrMethods[fd.Name.Name] = true
				}
			}
		}
	}
	roots := []string{"Backend.Execute", "Backend.issue"}
	if tab := decls["opTable"]; tab != nil {
		ast.Inspect(tab.Body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && decls[id.Name] != nil {
				roots = append(roots, id.Name)
			}
			return true
		})
	}
	writes := map[string][]string{}
	seen := map[string]bool{}
	var visit func(key string)
	visit = func(key string) {
		d := decls[key]
		if d == nil || seen[key] {
			return
		}
		seen[key] = true
		vars := backendVars(d)
		// field is the Backend field an expression writes through, or "".
		field := func(e ast.Expr) string {
			var path []string
			for {
				switch x := e.(type) {
				case *ast.SelectorExpr:
					path = append([]string{x.Sel.Name}, path...)
					e = x.X
					continue
				case *ast.IndexExpr:
					path = nil // an element: the field is what is indexed
					e = x.X
					continue
				case *ast.StarExpr:
					e = x.X
					continue
				case *ast.ParenExpr:
					e = x.X
					continue
				case *ast.Ident:
					if !vars[x.Name] || len(path) == 0 {
						return ""
					}
				default:
					return ""
				}
				break
			}
			if path[0] == "mm" && len(path) > 1 {
				return "mm." + path[1]
			}
			return path[0]
		}
		note := func(e ast.Expr) {
			if f := field(e); f != "" && !slices.Contains(writes[f], key) {
				writes[f] = append(writes[f], key)
			}
		}
		ast.Inspect(d.Body, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.AssignStmt:
				for _, l := range x.Lhs {
					note(l)
				}
			case *ast.IncDecStmt:
				note(x.X)
			case *ast.UnaryExpr:
				if x.Op == token.AND {
					note(x.X)
				}
			case *ast.CallExpr:
				switch fn := x.Fun.(type) {
				case *ast.Ident:
					visit(fn.Name)
				case *ast.SelectorExpr:
					if id, ok := fn.X.(*ast.Ident); ok && vars[id.Name] {
						visit("Backend." + fn.Sel.Name)
					} else if ptrMethods[fn.Sel.Name] {
						note(fn.X) // b.cap.noteNode(n): the method may write the field
					}
				}
			}
			return true
		})
	}
	for _, r := range roots {
		visit(r)
	}
	return writes
}
