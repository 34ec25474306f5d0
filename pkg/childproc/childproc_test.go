package childproc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// commandFile is the one file under test/ that starts processes itself:
// framework.Command and CommandContext tie each to the test binary.
const commandFile = "test/framework/command.go"

// TestTestsStartProcessesThroughTheFramework: a process a test starts on
// its own outlives a test binary killed at its timeout and loads the next
// run, so every test under test/ starts them with framework.Command or
// CommandContext (issue 49).
func TestTestsStartProcessesThroughTheFramework(t *testing.T) {
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(filepath.Join(root, "test"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.ToSlash(rel) == commandFile {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]string{} // local name → the starting function's package
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != "os/exec" && p != "os" && p != "syscall" {
				continue
			}
			name := filepath.Base(p)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch p := names[id.Name]; {
			case p == "os/exec" && (sel.Sel.Name == "Command" || sel.Sel.Name == "CommandContext"),
				p == "os" && sel.Sel.Name == "StartProcess",
				p == "syscall" && (sel.Sel.Name == "ForkExec" || sel.Sel.Name == "StartProcess"):
				t.Errorf("%s: %s.%s: start it with framework.Command or CommandContext, which tie it to the test binary",
					fset.Position(sel.Pos()), id.Name, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files under test/, want the integration tests' (is the repository laid out as expected?)", files)
	}
}
