package manifests

import (
	"path/filepath"
	"testing"
)

// repoRoot is the module's directory: go test runs a package's tests in its
// directory, pkg/manifests.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// helmCLI is bin/helm; the test fails (never skips) when it is missing, saying
// to run make helm.
func helmCLI(t *testing.T) string {
	t.Helper()
	p, err := Helm(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deployKustomization writes a kustomization of deploy/base with the
// components of the given controllers and returns its directory.
func deployKustomization(t *testing.T, controllerNames []string) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteDeployKustomization(dir, filepath.Join(repoRoot(t), "deploy"), controllerNames); err != nil {
		t.Fatal(err)
	}
	return dir
}
