package integration

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestMain stops the spare control plane (test/framework/spare.go) after the tests.
func TestMain(m *testing.M) { framework.Main(m) }

// TestSpareControlPlaneIsFresh: a test that asks for a control plane of the
// configuration the previous one had gets the spare (test/framework/spare.go),
// which nothing else used: another server, without the previous one's objects.
func TestSpareControlPlaneIsFresh(t *testing.T) {
	var first, dir string
	t.Run("first", func(t *testing.T) {
		cp := framework.StartControlPlane(t, controlplane.Config{})
		first = cp.Server()
		dir = cp.Dir()
		if _, err := os.Stat(filepath.Join(dir, "logs", controlplane.APIServer+".log")); err != nil {
			t.Fatalf("the control plane's logs: %v", err)
		}
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "left-behind"}}
		if _, err := framework.Client(t, cp).CoreV1().Namespaces().Create(framework.Context(t), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second", func(t *testing.T) {
		cp := framework.StartControlPlane(t, controlplane.Config{})
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the first control plane's directory %s after its test: %v, want it removed", dir, err)
		}
		if cp.Server() == first {
			t.Fatalf("the second control plane is the first one, %s", first)
		}
		_, err := framework.Client(t, cp).CoreV1().Namespaces().Get(framework.Context(t), "left-behind", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the first test's namespace on the second control plane: %v, want NotFound", err)
		}
	})
}
