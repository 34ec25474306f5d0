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
	files, err := Files()
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
			t.Errorf("%s is stale (it differs from what the descriptors in pkg/controllers give); run `make generate` and commit the result", path)
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
