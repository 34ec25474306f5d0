package controllerutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkersWaitForTheirHandlers: code that adds an event handler to an
// informer waits for that handler's registration to have seen the first list,
// not for the informer's store. A handler that fills what the workers decide
// from (a cache, a policy's brake state, a kubelet's pods) may lag the store
// it is fed from; a worker started on the store's sync then decides on part
// of the world (the scheduler bound a pod without preempting so, in make
// test-loaded). One function that both calls X.AddEventHandler and reads
// X.HasSynced is the mistake this test names.
func TestWorkersWaitForTheirHandlers(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata", "controlplane":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			handled := map[string]bool{}
			var synced []*ast.SelectorExpr
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "AddEventHandler", "AddEventHandlerWithResyncPeriod", "AddEventHandlerWithOptions":
					handled[types.ExprString(sel.X)] = true
				case "HasSynced":
					synced = append(synced, sel)
				}
				return true
			})
			checked++
			for _, sel := range synced {
				if x := types.ExprString(sel.X); handled[x] {
					t.Errorf("%s: %s adds an event handler to %s and waits on %s.HasSynced, the store's sync: wait on the handler's registration (reg.HasSynced) instead",
						fset.Position(sel.Pos()), fn.Name.Name, x, x)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d functions checked: the walk from %s did not reach the module's code", checked, root)
	}
}
