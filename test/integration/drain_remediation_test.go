package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestDrainForRemediationRequest: the drain controller alone, without any
// drain rule, cordons and drains a node whose remediation record asks for a
// drain (a Drain step of policy gpu), with the owner record naming the
// request, and uncordons it at once when the record goes (--uncordon-after
// is an hour: the remediation's hold time has already passed).
func TestDrainForRemediationRequest(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick, other := names[0], names[1]
	for _, n := range names {
		framework.Eventually(t, 60*time.Second, n+" Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue))
	}

	// Everything is in place before the controller starts: the pod, and
	// the request on its node.
	createPod(t, client, "worker", sick, nil)
	framework.Eventually(t, 60*time.Second, "worker Ready", podReadyIs(client, "worker", v1.ConditionTrue))
	now := time.Now()
	record := remediation.EncodeState("gpu", remediation.ActionDrain,
		remediation.State{Step: 1, StepSince: now, RepairSince: now.Add(-time.Minute), Drain: true})
	framework.UpdateNode(t, client, sick, func(n *v1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[remediation.AnnotationState] = record
	})
	const why = "remediation policy gpu, step 2 (Drain)"

	conf := fastLifecycle(100)
	d := &conf.Drain
	d.Conditions, d.File = nil, "" // no rule: requests only
	d.EvictUnreplicatedPods = true // the worker has no controller
	d.DrainTimeout, d.MaxGracePeriod = 30*time.Second, 5*time.Second
	d.UncordonAfter = time.Hour
	d.ResyncPeriod = time.Hour // the annotation's changes must be seen as they come, not by a resync
	ns := framework.StartNodeShepherd(t, cfg, conf, func(o *manager.Options) { o.Controllers = []string{drain.Name} })

	framework.Eventually(t, 60*time.Second, sick+" cordoned for the request", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		rec, _ := owner.Of(n, owner.Cordon)
		return n.Spec.Unschedulable && ownedByDrain(n) && n.Annotations[drain.AnnotationRequest] == why && rec.Why == why && rec.Controller == drain.Name,
			fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	framework.Eventually(t, 60*time.Second, "worker evicted", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "worker", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("deletionTimestamp %v", p.DeletionTimestamp), nil
	})
	framework.Eventually(t, 60*time.Second, "drain of "+sick+" completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if _, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventCordonSucceeded), 1); msgs[0] != "Cordoned node: "+why {
		t.Errorf("CordonSucceeded says %q, want it to name the request", msgs[0])
	}
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); got != 1 {
		t.Errorf("%v evictions accepted, want 1", got)
	}
	if n := getNode(t, client, other); n.Spec.Unschedulable || ownedByDrain(n) {
		t.Errorf("%s, which no request names, was cordoned", other)
	}

	framework.UpdateNode(t, client, sick, func(n *v1.Node) { delete(n.Annotations, remediation.AnnotationState) })
	framework.Eventually(t, 30*time.Second, sick+" uncordoned at once", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, rec := owner.Of(n, owner.Cordon)
		return !n.Spec.Unschedulable && !ownedByDrain(n) && !rec && n.Annotations[drain.AnnotationRequest] == "" &&
				kube.NodeCondition(n, drain.ConditionDrainScheduled) == nil,
			fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	_, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventUncordonStarting), 1)
	if want := "Uncordoning node: the remediation's repair ended (" + why + ")"; msgs[0] != want {
		t.Errorf("UncordonStarting says %q, want %q", msgs[0], want)
	}
	framework.WaitEvents(t, client, nodeEvents(sick, drain.EventUncordonSucceeded), 1)
	// The drain buffer (0 here) no longer counts from the drain's start:
	// nothing of the controller's stays on the node (issue 46 point 5).
	framework.Eventually(t, 30*time.Second, sick+" without "+drain.AnnotationDrainStarted, func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, has := n.Annotations[drain.AnnotationDrainStarted]
		return !has, fmt.Sprintf("annotations %v", n.Annotations), nil
	})
	if _, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainScheduled), 1); !strings.HasSuffix(msgs[0], "for "+why) {
		t.Errorf("DrainScheduled says %q, want it to name the request", msgs[0])
	}
}
