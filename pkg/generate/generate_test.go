package generate

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

const root = "../.."

// A file that follows from the descriptors and differs from what `make
// generate` writes is stale: the test names it and the command.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s: %v; run `make generate`", path, err)
			continue
		}
		if string(got) != string(files[path]) {
			t.Errorf("%s is stale (it differs from what the descriptors in pkg/controllers and %s give); run `make generate` and commit the result", path, DeployConfig)
		}
	}
	// A component whose controller is gone is stale too.
	dirs, err := os.ReadDir(filepath.Join(root, ComponentsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !slices.Contains(controllers.Names, d.Name()) {
			t.Errorf("%s/%s: no controller %q in pkg/controllers; remove the directory (make generate writes only the registry's)", ComponentsDir, d.Name(), d.Name())
		}
	}
}

// Every controller package states its rules where its code is, with a
// comment saying why it needs them.
func TestEveryControllerStatesItsRules(t *testing.T) {
	for _, d := range controllers.Registry() {
		if _, err := d.RBAC(); err != nil {
			t.Error(err)
		}
		if why := why(d.RBACRules); len(why) == 0 || !strings.HasPrefix(why[0], "# "+d.Name+":") {
			t.Errorf("pkg/controller/%s/rbac.yaml: start with a comment \"# %s: ...\" saying why it needs each rule", d.Name, d.Name)
		}
	}
}

// A file generated in part has exactly one line to replace: a file whose
// line is gone, or twice there, is an error naming it, not a silent skip.
func TestReplaceLineNeedsExactlyOne(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"a: 1\ncontrollers: [x]\nb: 2\n": "a: 1\ncontrollers: [y, z]\nb: 2\n",
		"a: 1\n":                         "",
		"controllers: [x]\n  controllers: [x]\ncontrollers: []\n": "",
	} {
		if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := replaceLine(dir, "values.yaml", "controllers: [", "controllers: [y, z]")
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), "values.yaml: ")):
			t.Errorf("%q: %q, %v; want an error naming the file", content, got, err)
		case want != "" && (err != nil || string(got) != want):
			t.Errorf("%q: %q, %v; want %q", content, got, err, want)
		}
	}
}
