package controllerutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDryRunWritesApplyToLaterVersions(t *testing.T) {
	var w DryRunWrites[*v1.Node]
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}}
	if got := w.Apply("n", n); got != n {
		t.Fatal("Apply without changes must return the object itself")
	}
	w.Add("n", func(n *v1.Node) { n.Spec.Unschedulable = true })
	w.Add("n", func(n *v1.Node) { n.Labels = map[string]string{"cordoned": "yes"} })
	newer := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "2"}}
	got := w.Apply("n", newer)
	if !got.Spec.Unschedulable || got.Labels["cordoned"] != "yes" || got.ResourceVersion != "2" {
		t.Errorf("Apply = %+v, want both changes on version 2", got)
	}
	if newer.Spec.Unschedulable || newer.Labels != nil {
		t.Error("Apply changed the cached object; it must change a copy")
	}
	w.Forget("n")
	if got := w.Apply("n", newer); got != newer {
		t.Error("changes survived Forget")
	}
}

func TestNilDryRunIsNotEnabled(t *testing.T) {
	var d *DryRun
	if d.Enabled() {
		t.Error("a nil reporter must not be in dry run")
	}
}
