package fakenode

import (
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
)

// The chaos checker tells a kubelet's own post of a pod's Ready condition
// from a controller's restore by this field manager.
func TestFieldManagerIsTheKubeletsForTheChecker(t *testing.T) {
	if FieldManager != chaos.KubeletManager {
		t.Fatalf("fake kubelets write pod status as %q, the chaos checker takes %q for the kubelet", FieldManager, chaos.KubeletManager)
	}
}
