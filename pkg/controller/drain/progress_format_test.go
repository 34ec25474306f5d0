package drain

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// The remediation ladder reads the drain's progress from the Node by its
// public format (remediation.DrainProgressOf): the names must be this
// controller's, and a node this controller drained reads as done.
func TestRemediationReadsTheDrainsFormat(t *testing.T) {
	if remediation.DrainCondition != ConditionDrainScheduled || remediation.DrainCompleted != completedMarker ||
		remediation.DrainFailed != failedMarker || remediation.DrainCordonedAt != AnnotationCordonedAt ||
		remediation.DrainOwned != AnnotationConditions || remediation.DrainBlockedSince != AnnotationBlockedSince {
		t.Fatal("pkg/remediation's names of the drain's node state differ from the drain controller's (state.go)")
	}
	now := time.Date(2026, 12, 2, 8, 0, 0, 123456789, time.UTC)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	cordon(n, holders{request: "policy p, step 2"}, now, "")
	setDrainCondition(n, v1.ConditionTrue, scheduledMessage(now), now)
	if p := remediation.DrainProgressOf(n); p.Done || p.Why != "draining" {
		t.Errorf("in flight: %+v", p)
	}
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(now, true, now.Add(time.Second), ""), now.Add(time.Second))
	if p := remediation.DrainProgressOf(n); !p.Done {
		t.Errorf("completed: %+v, want done", p)
	}
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(now, false, now.Add(time.Second), "default/web-1 (PodDisruptionBudget web refuses)"), now.Add(time.Second))
	if p := remediation.DrainProgressOf(n); p.Done || p.Why == "" {
		t.Errorf("failed: %+v, want not done, with why", p)
	}
}
