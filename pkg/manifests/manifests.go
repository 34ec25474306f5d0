package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DeployNamespace is where deploy/base puts nodeshepherd.
const DeployNamespace = "nodeshepherd-system"

// WriteDeployKustomization writes dir/kustomization.yaml: deploy/base (of
// deployDir) with the components of the given controllers
// (deployDir/components/NAME), as deploy/kustomization.yaml and the overlays
// compose them.
func WriteDeployKustomization(dir, deployDir string, controllerNames []string) error {
	rel := func(p string) (string, error) {
		return filepath.Rel(dir, filepath.Join(deployDir, p)) // kustomize takes no absolute paths
	}
	var b strings.Builder
	base, err := rel("base")
	if err != nil {
		return err
	}
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + base + "\ncomponents:\n")
	for _, c := range controllerNames {
		r, err := rel(filepath.Join("components", c))
		if err != nil {
			return err
		}
		b.WriteString("- " + r + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644)
}

// Helm is the Helm CLI that `make helm` builds into root/bin (pinned in
// hack/helm/go.mod), or an error that says to build it.
func Helm(root string) (string, error) {
	p := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s is missing: run `make helm` (make test and make test-unit build it)", p)
		}
		return "", fmt.Errorf("%s: %v (run `make helm` to rebuild it)", p, err)
	}
	return p, nil
}

// HelmTemplate renders chart with helm in deploy/'s namespace (created by the
// chart, as deploy/ creates it, unless values say createNamespace: false)
// with values (YAML). It returns the rendered objects, or on failure helm's
// error output.
func HelmTemplate(helm, chart, values string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "nodeshepherd-helm-values-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	base, vf := filepath.Join(dir, "base.yaml"), filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(base, []byte("createNamespace: true\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
		return nil, err
	}
	// The later values file wins: values may turn createNamespace off.
	cmd := exec.Command(helm, "template", "nodeshepherd", chart,
		"--namespace", DeployNamespace, "--values", base, "--values", vf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.Bytes(), err
	}
	return out, nil
}
