package manifests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

// leaderElection stands for leader election in the list, and
// unlistedControllers for the controllers no other scenario names, as the
// constants of those names in test/integration say.
const (
	leaderElection      = "leader election"
	unlistedControllers = "unlisted controllers"
)

// TestServiceAccountScenariosCoverEveryController checks, from the sources
// of test/integration, that exactly the scenarios listed in its
// serviceAccountScenarios call asServiceAccount at their start and that
// together they cover every controller and leader election: the RBAC check
// is one pass over the controllers' own scenarios, and over
// TestUnlistedControllersAsServiceAccount for the controllers none of them
// names. It reads the sources, so it needs no control plane.
func TestServiceAccountScenariosCoverEveryController(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "test", "integration")
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("test sources in %s: %v (none found)", dir, err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	calling := map[string]bool{}
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil || len(fn.Body.List) == 0 {
				continue
			}
			if call, ok := fn.Body.List[0].(*ast.ExprStmt); ok {
				if c, ok := call.X.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "asServiceAccount" {
						calling[fn.Name.Name] = true
					}
				}
			}
		}
	}
	scenarios, err := serviceAccountScenarios(fset, parsed)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	for name, want := range map[string]string{"leaderElection": leaderElection, "unlistedControllers": unlistedControllers} {
		if got := scenarios.consts[name]; got != want {
			t.Fatalf("%s: constant %s is %q, want %q (the name this test looks for)", dir, name, got, want)
		}
	}
	covered := map[string]bool{}
	for name, what := range scenarios.list {
		if !calling[name] {
			t.Errorf("%s is listed in serviceAccountScenarios but does not call asServiceAccount(t) first", name)
		}
		for _, w := range what {
			covered[w] = true
		}
	}
	for name := range calling {
		if _, ok := scenarios.list[name]; !ok {
			t.Errorf("%s calls asServiceAccount but is not listed in serviceAccountScenarios", name)
		}
	}
	if !covered[unlistedControllers] {
		t.Errorf("no scenario runs the %s (a test of test/integration listed as {unlistedControllers}): a new controller would need a scenario of its own", unlistedControllers)
	}
	if !covered[leaderElection] {
		t.Errorf("no scenario runs %s as deploy/'s ServiceAccount", leaderElection)
	}
	for w := range covered {
		if w != leaderElection && w != unlistedControllers && !slices.Contains(controllers.Names, w) {
			t.Errorf("serviceAccountScenarios names %q, which is no controller", w)
		}
	}
	for _, name := range controllers.Names {
		if !covered[name] {
			t.Logf("%s: no scenario of its own; TestUnlistedControllersAsServiceAccount runs it as deploy/'s ServiceAccount", name)
		}
	}
}

type scenarioList struct {
	list   map[string][]string // test: what it runs as the ServiceAccount
	consts map[string]string   // the package's string constants, by name
}

// serviceAccountScenarios reads the package-level map literal of that name
// (test name: controllers, as string literals or string constants).
func serviceAccountScenarios(fset *token.FileSet, files []*ast.File) (scenarioList, error) {
	s := scenarioList{list: map[string][]string{}, consts: map[string]string{}}
	var lit *ast.CompositeLit
	for _, file := range files {
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						if gd.Tok == token.CONST && v.Kind == token.STRING {
							s.consts[name.Name], _ = strconv.Unquote(v.Value)
						}
					case *ast.CompositeLit:
						if gd.Tok == token.VAR && name.Name == "serviceAccountScenarios" {
							lit = v
						}
					}
				}
			}
		}
	}
	if lit == nil {
		return s, fmt.Errorf("no package-level var serviceAccountScenarios = map[string][]string{...}")
	}
	str := func(e ast.Expr) (string, error) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				return strconv.Unquote(e.Value)
			}
		case *ast.Ident:
			if v, ok := s.consts[e.Name]; ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%s: serviceAccountScenarios holds an expression other than a string literal or a string constant of the package", fset.Position(e.Pos()))
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return s, fmt.Errorf("%s: serviceAccountScenarios: want test: {controllers}", fset.Position(el.Pos()))
		}
		name, err := str(kv.Key)
		if err != nil {
			return s, err
		}
		what, ok := kv.Value.(*ast.CompositeLit)
		if !ok {
			return s, fmt.Errorf("%s: serviceAccountScenarios[%q]: want a list literal", fset.Position(kv.Value.Pos()), name)
		}
		s.list[name] = []string{}
		for _, w := range what.Elts {
			v, err := str(w)
			if err != nil {
				return s, err
			}
			s.list[name] = append(s.list[name], v)
		}
	}
	if len(s.list) == 0 {
		return s, fmt.Errorf("serviceAccountScenarios is empty")
	}
	return s, nil
}
