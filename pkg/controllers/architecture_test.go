package controllers

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const controllerPrefix = "github.com/nodeshepherd/nodeshepherd/pkg/controller/"

// controllerOf is the controller a package under pkg/controller belongs to
// (its first path element), or "" for a package outside pkg/controller.
func controllerOf(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, controllerPrefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// What controllers share lives outside pkg/controller (pkg/nodetopology,
// pkg/controllerutil, pkg/kube), so that a controller can be changed, turned
// off or moved without touching another. Test files count too.
func TestNoControllerImportsAnother(t *testing.T) {
	// go test puts the go command that runs it first on PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("finding the go command: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		controllerPrefix+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkgs++
		self := controllerOf(fields[0])
		for _, imp := range fields[1:] {
			if other := controllerOf(imp); other != "" && other != self {
				t.Errorf("%s imports %s: controller %q must not import controller %q; move what they share out of pkg/controller",
					fields[0], imp, self, other)
			}
		}
	}
	if pkgs < 6 {
		t.Fatalf("go list found %d packages under %s, want at least the six controllers:\n%s", pkgs, controllerPrefix, out)
	}
}

// wallClockOrRootContext finds calls that bypass the injected clock (fake
// clocks in tests could not drive them) or start a context that shutdown
// cannot cancel; rootContext only the latter.
var (
	wallClockOrRootContext = regexp.MustCompile(`\btime\.(Now|Since|Until|After|AfterFunc|NewTimer|NewTicker|Tick|Sleep)\(|\bcontext\.(Background|TODO)\(`)
	rootContext            = regexp.MustCompile(`\bcontext\.(Background|TODO)\(`)
)

// allowMarker on the same line exempts a call; it must be followed by why.
const allowMarker = "arch:allow "

// Controllers, and the shared code they call, take time from their injected
// clock and do their work under the context they were run with. simulate
// measures wall-clock time by design, but it too works under its command's
// context, so that an interrupt stops it. A justified exception carries
// "// arch:allow <why>" on its line.
func TestControllersUseInjectedClockAndRunContext(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, rule := range []struct {
		dir     string
		pattern *regexp.Regexp
	}{
		{"pkg/controller", wallClockOrRootContext},
		{"pkg/manager", wallClockOrRootContext},
		{"pkg/controllerutil", wallClockOrRootContext},
		{"pkg/nodetopology", wallClockOrRootContext},
		{"pkg/kube", wallClockOrRootContext},
		{"pkg/owner", wallClockOrRootContext},
		{"pkg/simulate", rootContext},
	} {
		err := filepath.WalkDir(filepath.Join(root, rule.dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			checked++
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, _ := filepath.Rel(root, path)
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
			for n := 1; sc.Scan(); n++ {
				line := sc.Text()
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				m := rule.pattern.FindString(line)
				if m == "" {
					continue
				}
				if _, why, ok := strings.Cut(line, "// "+allowMarker); ok && strings.TrimSpace(why) != "" {
					continue
				}
				t.Errorf("%s:%d: %s...): use the injected clock (k8s.io/utils/clock) or the run context, "+
					"or justify it with \"// %s<why>\" on the line", filepath.ToSlash(rel), n, m, allowMarker)
			}
			return sc.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no controller sources found: was the test moved?")
	}
}
