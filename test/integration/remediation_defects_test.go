package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Two policies selecting one node: besides the Node's event, each policy's
// status names the node and a metric counts it (issue 46 point 5).
func TestRemediationConflictInBothPolicies(t *testing.T) {
	rig := startRemediationRig(t, editLadder, "edit", 2, 0) // policy edit selects pool=edit
	createPolicy(t, rig.policies, `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: second}
spec:
  nodeSelector: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [`+rig.names[0]+`]}]}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 5s
  steps:
  - {action: Taint, timeout: 10m, taint: {key: example.com/second, effect: NoSchedule}}
`)
	ns := framework.StartNodeShepherd(t, rig.cp.RESTConfig(), controllers.Default(), func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	for _, name := range []string{"edit", "second"} {
		framework.Eventually(t, time.Minute, "policy "+name+"'s status names the conflict", func(ctx context.Context) (bool, string, error) {
			u, err := rig.policies.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			var p remediation.RemediationPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
				return false, "", err
			}
			return slices.Equal(p.Status.Conflicts, []string{rig.names[0]}), fmt.Sprintf("conflicts %v", p.Status.Conflicts), nil
		})
		framework.Eventually(t, time.Minute, "metric conflicting_nodes of "+name, func(context.Context) (bool, string, error) {
			got := ns.Metric(t, "nodeshepherd_remediation_conflicting_nodes", map[string]string{"policy": name})
			return got == 1, fmt.Sprint(got), nil
		})
	}
}

// taintThenReboot: a short Taint step, then a Reboot.
var taintThenReboot = deadlockPolicy("edit", "edit", "",
	"{action: Taint, timeout: 10s, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}", "{action: Reboot, timeout: 10m}")

// deadlockPolicy is RemediationPolicy name of the nodes pool=pool, unhealthy
// on KernelDeadlock=True for 2s, healthy after 5s, with the steps (YAML flow
// mappings) and the rest of its spec (say "brakes: {maxInRepair: 1}").
func deadlockPolicy(name, pool, rest string, steps ...string) string {
	doc := fmt.Sprintf(`
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {pool: %s}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 5s
  steps:
`, name, pool)
	for _, st := range steps {
		doc += "  - " + st + "\n"
	}
	if rest != "" {
		doc += "  " + rest + "\n"
	}
	return doc
}

// A person's cordon during a repair pauses it (issue 46 point 5): the node
// cordoned at its Taint step is not rebooted at the step's timeout, an
// event says why; uncordoned, the repair goes on and the Reboot runs.
func TestRemediationCordonDuringRepairPauses(t *testing.T) {
	client, _, _, sick := editRig(t, taintThenReboot)
	framework.Eventually(t, 2*time.Minute, sick+" at step 1 (Taint)", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, client, sick)
		return ok && r.Step == 0 && r.Action == remediation.ActionTaint, fmt.Sprintf("%+v %v", r, err), nil
	})
	boot := getNode(t, client, sick).Status.NodeInfo.BootID
	framework.UpdateNode(t, client, sick, func(n *v1.Node) { n.Spec.Unschedulable = true }) // kubectl cordon
	framework.Eventually(t, 2*time.Minute, sick+"'s repair paused, said in an event", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, client, sick, ctrl.EventBlocked, 0)
		return strings.Contains(strings.Join(msgs, "\n"), "cordoned by someone else"), fmt.Sprintf("%q", msgs), nil
	})
	if n, r, _, err := repairRecord(framework.Context(t), client, sick); err != nil || n.Status.NodeInfo.BootID != boot || r.Step != 0 {
		t.Fatalf("%s cordoned by a person past its Taint step's timeout: boot %s (was %s), record %+v, %v; want the repair paused at step 1",
			sick, n.Status.NodeInfo.BootID, boot, r, err)
	}
	framework.UpdateNode(t, client, sick, func(n *v1.Node) { n.Spec.Unschedulable = false })
	framework.Eventually(t, 2*time.Minute, sick+" rebooted once uncordoned", func(ctx context.Context) (bool, string, error) {
		n, r, _, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != boot, fmt.Sprintf("boot %s, record %+v", n.Status.NodeInfo.BootID, r), nil
	})
}

// replaceLadder: a Replace at once; one node in repair at a time.
var replaceLadder = deadlockPolicy("edit", "edit", "brakes: {maxInRepair: 1}", "{action: Replace, timeout: 10m}")

// A machine being replaced counts against the brakes until its new Node is
// Ready (issue 46 point 3): while the old Node is gone, another unhealthy
// node's repair is held back ("1 of 3 nodes … in repair"), and the policy's
// status lists the replacement; once the new Node is Ready, the other
// repair starts. The count lives in the policy's status, so a new leader
// that takes over while the old Node is gone holds the other repair back
// too (the "failover" case: the first process stops once the Node is gone,
// the second starts with nothing in memory).
func TestRemediationReplacementCountsUntilReady(t *testing.T) {
	for _, failover := range []bool{false, true} {
		t.Run(map[bool]string{false: "one leader", true: "failover"}[failover], func(t *testing.T) {
			// The replacement's downtime leaves a new leader time to start
			// and judge b before a's new Node registers, on a busy machine.
			rig := startRemediationRig(t, replaceLadder, "edit", 3, time.Minute)
			cfg := controllers.Default()
			cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
			run := func() *framework.NodeShepherd {
				return framework.StartNodeShepherd(t, rig.cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
			}
			first := run()
			a, b := rig.names[0], rig.names[1]
			oldA := getNode(t, rig.client, a)
			setCondition(t, rig.m, fakenode.SetCondition, v1.ConditionTrue, a)
			framework.Eventually(t, 2*time.Minute, a+"'s Node gone with its machine", func(ctx context.Context) (bool, string, error) {
				_, err := rig.client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
				return apierrors.IsNotFound(err), fmt.Sprint(err), nil
			})
			if failover {
				first.Stop()
			}
			setCondition(t, rig.m, fakenode.ClearCondition, "", a) // the new machine is healthy
			setCondition(t, rig.m, fakenode.SetCondition, v1.ConditionTrue, b)
			if failover {
				run()
			}
			framework.Eventually(t, time.Minute, b+" held back while "+a+" is being replaced", func(ctx context.Context) (bool, string, error) {
				_, msgs := eventCount(t, rig.client, b, ctrl.EventBlocked, 0)
				if _, r, ok, err := repairRecord(ctx, rig.client, b); err == nil && ok {
					if _, err := rig.client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{}); apierrors.IsNotFound(err) {
						return false, "", fmt.Errorf("%s's repair started (%+v) while %s's Node was gone: the replacement was not counted", b, r, a)
					}
				}
				return strings.Contains(strings.Join(msgs, "\n"), "1 of 3 nodes of pool edit in repair, limit 1"), fmt.Sprintf("%q", msgs), nil
			})
			framework.Eventually(t, time.Minute, "policy edit's status lists the replacement", policyStatus(rig.policies, "edit", func(st remediation.PolicyStatus) bool {
				return len(st.Replacing) == 1 && st.Replacing[0].Node == a && st.Replacing[0].UID == string(oldA.UID) && st.InRepair >= 1
			}))
			// Seen by its event: a Replace at once deletes b's Node a moment after
			// its record is written, too soon for a poll of the record to see it.
			framework.Eventually(t, 3*time.Minute, b+"'s repair starts once "+a+"'s new Node is Ready", func(ctx context.Context) (bool, string, error) {
				n, msgs := eventCount(t, rig.client, b, ctrl.EventStarted, 0)
				return n >= 1, fmt.Sprintf("%q", msgs), nil
			})
			if n := getNode(t, rig.client, a); n.UID == oldA.UID {
				t.Errorf("%s: the same Node (uid %s), want the replacement's", a, n.UID)
			}
		})
	}
}

// A fault that comes back soon after a repair ended resumes above the step
// that ended it (issue 46 point 5, as AKS escalates): repaired at its Taint
// step, the node unhealthy again within the recurrence window starts at the
// Reboot step, and its machine is rebooted; the last repair is on the node
// (nodeshepherd.io/remediation-last).
func TestRemediationRecurrenceResumesHigher(t *testing.T) {
	client, _, m, sick := editRig(t, taintThenReboot)
	framework.Eventually(t, 2*time.Minute, sick+" at step 1 (Taint)", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, client, sick)
		return ok && r.Step == 0, fmt.Sprintf("%+v %v", r, err), nil
	})
	boot := getNode(t, client, sick).Status.NodeInfo.BootID
	setCondition(t, m, fakenode.ClearCondition, "", sick)
	framework.Eventually(t, 2*time.Minute, sick+" repaired at step 1, remembered", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		l, had := remediation.LastRepairOf(n, "edit")
		return !ok && had && l.Step == 0, fmt.Sprintf("in repair %v %+v, last %+v", ok, r, l), nil
	})
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 2*time.Minute, sick+"'s second repair starts at step 2 (Reboot)", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		if ok && r.Step == 0 {
			return false, "", fmt.Errorf("the second repair started at step 1 (%+v): the recent repair was not remembered", r)
		}
		return (ok && r.Step == 1) || n.Status.NodeInfo.BootID != boot, fmt.Sprintf("%+v", r), nil
	})
	framework.Eventually(t, 2*time.Minute, sick+" rebooted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != boot, n.Status.NodeInfo.BootID, nil
	})
}

// A leader change mid-ladder (issue 46 point 4): the node at its Taint step
// when the leader goes keeps that step and its start time under the next
// one (the step is not restarted), and its machine is rebooted once, by
// the new leader, at the step's timeout.
func TestRemediationFailoverMidLadder(t *testing.T) {
	rig := startRemediationRig(t, strings.Replace(taintThenReboot, "timeout: 10s", "timeout: 20s", 1), "edit", 2, 2*time.Second)
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	run := func() *framework.NodeShepherd {
		return framework.StartNodeShepherd(t, rig.cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	}
	first := run()
	sick := rig.names[0]
	setCondition(t, rig.m, fakenode.SetCondition, v1.ConditionTrue, sick)
	var atTaint remediation.Request
	framework.Eventually(t, 2*time.Minute, sick+" at step 1 (Taint)", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, rig.client, sick)
		atTaint = r
		return ok && r.Step == 0, fmt.Sprintf("%+v %v", r, err), nil
	})
	boot := getNode(t, rig.client, sick).Status.NodeInfo.BootID
	first.Stop() // the leader goes mid-ladder
	if _, r, ok, err := repairRecord(framework.Context(t), rig.client, sick); err != nil || !ok || r.Step != 0 {
		t.Fatalf("%s after the leader went: %+v, %v, %v; want it still at step 1 (nothing ran to change it)", sick, r, ok, err)
	}
	second := run()
	framework.Eventually(t, 3*time.Minute, sick+" rebooted by the new leader", func(ctx context.Context) (bool, string, error) {
		n, r, _, err := repairRecord(ctx, rig.client, sick)
		if err != nil {
			return false, "", err
		}
		if r.Step == 0 && !r.Since.Equal(atTaint.Since) {
			return false, "", fmt.Errorf("the new leader restarted step 1: since %v, was %v", r.Since, atTaint.Since)
		}
		return n.Status.NodeInfo.BootID != boot, fmt.Sprintf("boot %s, record %+v", n.Status.NodeInfo.BootID, r), nil
	})
	if v := second.Metric(t, "nodeshepherd_remediation_provider_requests_total", map[string]string{"action": "Reboot", "result": "accepted"}); v != 1 {
		t.Errorf("the new leader's Reboot requests accepted: %v, want 1", v)
	}
	if n, _ := eventCount(t, rig.client, sick, ctrl.EventStarted, 1); n != 1 {
		t.Errorf("%s: %d %s events, want 1 (the repair went on, not started again)", sick, n, ctrl.EventStarted)
	}
}

// The brakes' limits on a real pool (issue 46 point 5; unit
// TestBrakeLimits): maxInRepair 0 starts no repair, saying so; removed, the
// repair starts under maxUnhealthy 20% of a 4-node pool, which rounds up to
// 1 (rounded down it would be 0 and hold the one unhealthy node back).
func TestRemediationBrakeLimitsOnAPool(t *testing.T) {
	rig := startRemediationRig(t, deadlockPolicy("limits", "limits", `brakes: {maxUnhealthy: "20%", maxInRepair: 0}`,
		"{action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}"), "limits", 4, 0)
	framework.StartNodeShepherd(t, rig.cp.RESTConfig(), controllers.Default(), func(o *manager.Options) { o.Controllers = []string{ctrl.Name} })
	sick := rig.names[0]
	setCondition(t, rig.m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 2*time.Minute, sick+" held back by maxInRepair 0, said in an event", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, rig.client, sick, ctrl.EventBlocked, 0)
		return strings.Contains(strings.Join(msgs, "\n"), "0 of 4 nodes of pool limits in repair, limit 0"), fmt.Sprintf("%q", msgs), nil
	})
	if _, r, ok, err := repairRecord(framework.Context(t), rig.client, sick); err != nil || ok {
		t.Fatalf("%s in repair under maxInRepair 0: %+v, %v", sick, r, err)
	}
	framework.Eventually(t, time.Minute, "policy limits' maxInRepair removed", func(ctx context.Context) (bool, string, error) {
		u, err := rig.policies.Get(ctx, "limits", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		unstructured.RemoveNestedField(u.Object, "spec", "brakes", "maxInRepair")
		if _, err := rig.policies.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return false, err.Error(), nil // a conflict with a status write: again
		}
		return true, "", nil
	})
	framework.Eventually(t, 2*time.Minute, sick+"'s repair starts under maxUnhealthy 20% of 4 nodes", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, rig.client, sick)
		return ok && r.Step == 0, fmt.Sprintf("in repair %v %+v %v", ok, r, err), nil
	})
}

// A stale condition never ends a repair (issue 46 point 5; unit
// TestStaleConditionKeepsTheRepair): node-problem-detector posts
// KernelDeadlock=True once and hangs (its heartbeat stops; the kubelet's own
// conditions go on). Past staleAfter the condition counts as it last read,
// so the repair is not ended by the healthy hold (5 s) but climbs at the
// Taint step's timeout, saying the condition is stale.
func TestRemediationStaleConditionKeepsTheRepair(t *testing.T) {
	const policy = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: stale}
spec:
  nodeSelector: {matchLabels: {pool: stale}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s, staleAfter: 10s}
  healthyHold: 5s
  steps:
  - {action: Taint, timeout: 25s, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
  - {action: Reboot, timeout: 10m}
`
	rig := startRemediationRig(t, policy, "stale", 2, 2*time.Second)
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	framework.StartNodeShepherd(t, rig.cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{ctrl.Name} })
	sick := rig.names[0]
	// Posted through the API as node-problem-detector does, once: the fake
	// kubelet heartbeats only its own conditions (merged by type).
	framework.Eventually(t, time.Minute, "KernelDeadlock=True posted once", func(ctx context.Context) (bool, string, error) {
		n, err := rig.client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		now := metav1.Now()
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue,
			Reason: "DockerHung", LastHeartbeatTime: now, LastTransitionTime: now})
		if _, err := rig.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return false, err.Error(), nil // a conflict with the kubelet's heartbeat: again
		}
		return true, "", nil
	})
	framework.Eventually(t, 3*time.Minute, sick+" past its Taint step with the condition stale, said in an event", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, rig.client, sick, ctrl.EventStep, 0)
		for _, m := range msgs {
			if strings.Contains(m, "KernelDeadlock=True stale since") {
				return true, "", nil
			}
		}
		if n, done := eventCount(t, rig.client, sick, ctrl.EventDone, 0); n > 0 {
			return false, "", fmt.Errorf("%s's repair ended with KernelDeadlock=True stale: %q", sick, done)
		}
		return false, fmt.Sprintf("%s events %q", ctrl.EventStep, msgs), nil
	})
}
