package controllerutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(rv string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv}}
}

func TestOverlayChainsWrites(t *testing.T) {
	o := NewOverlay[*v1.Node]()
	cached := node("1")
	o.Put("n", "1", node("2")) // first write, from the informer's copy
	o.Put("n", "2", node("3")) // second write, from the first's result
	if got := o.Latest("n", cached).ResourceVersion; got != "3" {
		t.Errorf("informer still at 1: got %s, want the last write 3", got)
	}
	if got := o.Latest("n", node("2")).ResourceVersion; got != "3" {
		t.Errorf("informer at 2: got %s, want 3", got)
	}
	if got := o.Latest("n", node("3")).ResourceVersion; got != "3" {
		t.Errorf("informer caught up: got %s", got)
	}
	if got := o.Latest("n", cached).ResourceVersion; got != "1" {
		t.Errorf("entry should be gone once the informer delivered a version it does not supersede; got %s", got)
	}
	// Someone else wrote (5) between the version a write started from (4)
	// and the write (6): the informer's 5 must not hide 6.
	o.Put("n", "4", node("6"))
	if got := o.Latest("n", node("5")).ResourceVersion; got != "6" {
		t.Errorf("intermediate version 5 hid the write 6")
	}
	// A dry-run write keeps the version it started from.
	dry := node("6")
	dry.Labels = map[string]string{"dry": "run"}
	o.Put("n", "6", dry)
	if got := o.Latest("n", node("6")); got.Labels["dry"] != "run" {
		t.Errorf("dry-run entry lost")
	}
	o.Put("n", "7", node("8"))
	if got := o.Latest("n", node("9")).ResourceVersion; got != "9" {
		t.Errorf("a newer informer version wins: got %s", got)
	}
}
