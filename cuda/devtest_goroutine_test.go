package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// testStoppers end the calling goroutine (runtime.Goexit) or must run on
// the test's own goroutine.
var testStoppers = map[string]bool{"Fatal": true, "Fatalf": true, "FailNow": true, "Skip": true, "Skipf": true, "SkipNow": true}

// TestDeviceTests_NoFatalOrSkipInsideDo: the function a test passes to
// driver.Device.Do runs on the device's worker goroutine; a t.Fatal or
// t.Skip there (directly, or in a test helper it calls) ends that
// goroutine and every later Do waits forever. The first KERNELS=nvrtc
// device suite on the H200 (2026-12-02) hung 10 minutes on a t.Skipf in
// compareWithNvccFile. Functions passed to Do report with t.Errorf and
// return their errors.
func TestDeviceTests_NoFatalOrSkipInsideDo(t *testing.T) {
	for _, dir := range []string{".", "driver"} {
		bad, err := stoppersInsideDo(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("%s", b)
		}
	}
}

// stoppersInsideDo lists the t.Fatal/t.Skip calls reachable from a
// function literal passed to a Do method in the test files of dir,
// following calls to the package's own functions.
func stoppersInsideDo(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = fd
			}
		}
	}
	var bad []string
	var walk func(body ast.Node, via string, seen map[string]bool)
	walk = func(body ast.Node, via string, seen map[string]bool) {
		ast.Inspect(body, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fn := c.Fun.(type) {
			case *ast.SelectorExpr:
				if testStoppers[fn.Sel.Name] {
					bad = append(bad, fset.Position(c.Pos()).String()+": "+fn.Sel.Name+" inside a function passed to Do"+via)
				}
			case *ast.Ident:
				if fd := funcs[fn.Name]; fd != nil && !seen[fn.Name] {
					seen[fn.Name] = true
					v := via
					if v == "" {
						v = " (through " + fn.Name + ", called at " + fset.Position(c.Pos()).String() + ")"
					}
					walk(fd.Body, v, seen)
				}
			}
			return true
		})
	}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Do" && len(c.Args) == 1 {
				if lit, ok := c.Args[0].(*ast.FuncLit); ok {
					walk(lit.Body, "", map[string]bool{})
				}
			}
			return true
		})
	}
	return bad, nil
}
