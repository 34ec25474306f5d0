package controllers

import (
	"slices"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner/janitor"
)

// The janitor names the owner of the repair records by a constant of its
// own: it must be the remediation controller's name.
func TestJanitorNamesMatch(t *testing.T) {
	if janitor.RemediationName != remediation.Name {
		t.Fatalf("janitor.RemediationName %q, remediation.Name %q", janitor.RemediationName, remediation.Name)
	}
}

// The janitor reads Nodes afresh after a conflict and patches them: a
// controller that carries it must have both in its ClusterRole, which is
// all the process may have (deploy/'s overlays bind one role per
// controller it runs).
func TestJanitorCarriersMayPatchNodes(t *testing.T) {
	for _, info := range Registry() {
		if !slices.Contains(janitorCarriers, info.Name) {
			continue
		}
		rbac, err := info.RBAC()
		if err != nil {
			t.Fatal(err)
		}
		verbs := map[string]bool{}
		for _, r := range rbac.ClusterRules {
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "nodes") {
				for _, v := range r.Verbs {
					verbs[v] = true
				}
			}
		}
		for _, v := range []string{"get", "list", "watch", "patch"} {
			if !verbs[v] {
				t.Errorf("%s carries the janitor, but its ClusterRole does not grant %s on nodes", info.Name, v)
			}
		}
	}
	if len(janitorCarriers) != 3 {
		t.Errorf("carriers %v", janitorCarriers)
	}
}

// One janitor per process, in the first carrier it runs; none in a process
// that runs no carrier (the scheduler alone cannot patch Nodes).
func TestJanitorCarrier(t *testing.T) {
	for _, c := range []struct {
		running []string
		want    string
	}{
		{Names, nodelifecycle.Name},
		{[]string{"tainteviction", drain.Name, remediation.Name}, drain.Name},
		{[]string{remediation.Name, drain.Name}, drain.Name},
		{[]string{"scheduler"}, ""},
		{[]string{"outofservice", "readinessrestore"}, ""},
	} {
		if got := JanitorCarrier(c.running); got != c.want {
			t.Errorf("running %v: carrier %q, want %q", c.running, got, c.want)
		}
	}
}
