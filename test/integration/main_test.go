package integration

import (
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
	var first string
	t.Run("first", func(t *testing.T) {
		cp := framework.StartControlPlane(t, controlplane.Config{})
		first = cp.Server()
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "left-behind"}}
		if _, err := framework.Client(t, cp).CoreV1().Namespaces().Create(framework.Context(t), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second", func(t *testing.T) {
		cp := framework.StartControlPlane(t, controlplane.Config{})
		if cp.Server() == first {
			t.Fatalf("the second control plane is the first one, %s", first)
		}
		_, err := framework.Client(t, cp).CoreV1().Namespaces().Get(framework.Context(t), "left-behind", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the first test's namespace on the second control plane: %v, want NotFound", err)
		}
	})
}
