package integration

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manifests"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestHelmChartAcceptedByAPIServer applies what the chart renders for deploy/
// and for companion mode to a real kube-apiserver, server-side with strict
// field validation, as a dry run: every object and field is one the API
// server knows and accepts.
func TestHelmChartAcceptedByAPIServer(t *testing.T) {
	root := framework.RepoRoot(t)
	chart := filepath.Join(root, "charts", "nodeshepherd")
	helm, err := manifests.Helm(root)
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartControlPlane(t, controlplane.Config{})
	kubectl := func(stdin []byte, args ...string) {
		t.Helper()
		cmd := framework.Command("kubectl", append([]string{"--kubeconfig", cp.KubeconfigPath()}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// A dry run creates nothing, so the objects in the namespace need it for real.
	kubectl(nil, "create", "namespace", framework.DeployNamespace)
	for _, values := range []string{`createNamespace: false`, `{createNamespace: false, companion: {enabled: true}}`} {
		out, err := manifests.HelmTemplate(helm, chart, values)
		if err != nil {
			t.Fatalf("helm template with values %q: %v\n%s", values, err, out)
		}
		kubectl(out, "apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=helm-test", "-f", "-")
	}
}
