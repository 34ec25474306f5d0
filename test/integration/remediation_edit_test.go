package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// editLadder: KernelDeadlock for 2s; a long Taint step, so that an edit
// lands while the node is at it.
const editLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: edit}
spec:
  nodeSelector: {matchLabels: {pool: edit}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 5s
  steps:
  - {action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
`

// editRig starts a control plane, the policy, fake nodes of pool edit, the
// fake cloud and the drain and remediation controllers, and makes the
// first node unhealthy.
func editRig(t *testing.T, policy string) (kubernetes.Interface, dynamic.NamespaceableResourceInterface, *fakenode.Manager, string) {
	t.Helper()
	rig := startRemediationRig(t, policy, "edit", 2, 2*time.Second)
	cp, client, policies, m, names := rig.cp, rig.client, rig.policies, rig.m, rig.names
	ctx := framework.Context(t)
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	sick := names[0]
	c := &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{sick}}, Condition: c}); err != nil {
		t.Fatal(err)
	}
	return client, policies, m, sick
}

// editSteps replaces the policy's steps (and paused), retrying conflicts
// with the controller's status writes.
func editSteps(t *testing.T, policies dynamic.NamespaceableResourceInterface, name, steps string, paused bool) {
	t.Helper()
	var want []any
	if err := yaml.Unmarshal([]byte(steps), &want); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "policy "+name+" edited", func(ctx context.Context) (bool, string, error) {
		u, err := policies.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if err := unstructured.SetNestedSlice(u.Object, want, "spec", "steps"); err != nil {
			return false, "", err
		}
		if err := unstructured.SetNestedField(u.Object, paused, "spec", "paused"); err != nil {
			return false, "", err
		}
		if _, err := policies.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return false, err.Error(), nil // a conflict with a status write: again
		}
		return true, "", nil
	})
}

func repairRecord(ctx context.Context, client kubernetes.Interface, node string) (*v1.Node, remediation.Request, bool, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, remediation.Request{}, false, err
	}
	r, ok, err := remediation.RequestOf(n)
	return n, r, ok, err
}

// A step inserted before the node's current one is not run on the node: the
// node, at its Taint step, stays at that Taint step (now the second), its
// machine is not rebooted, and the record follows the step (event
// RemediationStep "the policy changed").
func TestRemediationEditInsertedStepNotRun(t *testing.T) {
	client, policies, _, sick := editRig(t, editLadder)
	ctx := framework.Context(t)
	framework.Eventually(t, 2*time.Minute, sick+" at step 1 (Taint)", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, client, sick)
		return ok && r.Step == 0 && r.Action == remediation.ActionTaint, fmt.Sprintf("%+v %v", r, err), nil
	})
	boot := getNode(t, client, sick).Status.NodeInfo.BootID
	editSteps(t, policies, "edit", `
- {action: Reboot, timeout: 10m}
- {action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
`, false)
	framework.Eventually(t, 2*time.Minute, sick+"'s record follows its Taint step to step 2, no reboot", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		if n.Status.NodeInfo.BootID != boot {
			return false, "", fmt.Errorf("%s rebooted (boot %s -> %s) by a step inserted before its own: record %+v", sick, boot, n.Status.NodeInfo.BootID, r)
		}
		return ok && r.Step == 1 && r.Action == remediation.ActionTaint, fmt.Sprintf("%+v", r), nil
	})
	if n, msgs := eventCount(t, client, sick, ctrl.EventStep, 1); n < 1 || !strings.Contains(strings.Join(msgs, "\n"), "the policy changed") {
		t.Errorf("%s: %s events %q, want one saying the policy changed", sick, ctrl.EventStep, msgs)
	}
	if n := getNode(t, client, sick); n.Status.NodeInfo.BootID != boot || kube.FindTaint(n, v1.Taint{Key: "nodeshepherd.io/unhealthy", Effect: v1.TaintEffectNoSchedule}) == nil {
		t.Errorf("%s after the edit: boot %s (was %s), taints %v", sick, n.Status.NodeInfo.BootID, boot, n.Spec.Taints)
	}
	_ = ctx
}

// drainLadder: a drain, then a taint.
const drainLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: edit}
spec:
  nodeSelector: {matchLabels: {pool: edit}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 5s
  steps:
  - {action: Drain, timeout: 10s}
  - {action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
`

// Steps removed under a node's current step end its repair cleanly: the
// record and the taint go, the drain controller uncordons the node, an
// event RemediationEnded says why; it is not frozen, cordoned for good.
// Judged again (the policy unpaused), it starts at step 1.
func TestRemediationEditRemovedStepEndsRepair(t *testing.T) {
	client, policies, _, sick := editRig(t, drainLadder)
	framework.Eventually(t, 2*time.Minute, sick+" at step 2 (Taint), drained", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		return ok && r.Step == 1 && r.Action == remediation.ActionTaint && n.Spec.Unschedulable, fmt.Sprintf("%+v unschedulable=%v", r, n.Spec.Unschedulable), nil
	})
	editSteps(t, policies, "edit", `
- {action: Drain, timeout: 10s}
`, true)
	framework.Eventually(t, 2*time.Minute, sick+"'s repair ended: no record, no taint, uncordoned", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, client, sick)
		if err != nil {
			return false, "", err
		}
		tainted := kube.FindTaint(n, v1.Taint{Key: "nodeshepherd.io/unhealthy", Effect: v1.TaintEffectNoSchedule}) != nil
		return !ok && !tainted && !n.Spec.Unschedulable, fmt.Sprintf("record %+v (%v) tainted=%v unschedulable=%v", r, ok, tainted, n.Spec.Unschedulable), nil
	})
	if n, msgs := eventCount(t, client, sick, ctrl.EventEnded, 1); n < 1 || !strings.Contains(strings.Join(msgs, "\n"), "no longer in the ladder") {
		t.Errorf("%s: %s events %q, want one saying its step is no longer in the ladder", sick, ctrl.EventEnded, msgs)
	}
	editSteps(t, policies, "edit", `
- {action: Drain, timeout: 10s}
`, false)
	framework.Eventually(t, 2*time.Minute, sick+" judged again: starts at step 1 (Drain)", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, client, sick)
		return ok && r.Step == 0 && r.Action == remediation.ActionDrain, fmt.Sprintf("%+v %v", r, err), nil
	})
}

// stormLadder: a pool of three; more than one unhealthy is a storm, and
// no new repair for 10 minutes after it.
const stormLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: edit}
spec:
  nodeSelector: {matchLabels: {pool: edit}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 5s
  steps:
  - {action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
  brakes: {maxUnhealthy: 1, cooldown: 10m}
`

// The cooldown after a storm survives a change of leader: the storm's end
// is kept in the policy's status, and a new process (the old one stopped
// mid-cooldown) holds the repair back until the cooldown ends, saying so,
// instead of starting it at once.
func TestRemediationCooldownSurvivesFailover(t *testing.T) {
	rig := startRemediationRig(t, stormLadder, "edit", 3, 0)
	cp, client, policies, m, names := rig.cp, rig.client, rig.policies, rig.m, rig.names
	ctx := framework.Context(t)
	deadlock := func(action fakenode.Action, nodes ...string) {
		t.Helper()
		c := &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}
		if action == fakenode.ClearCondition {
			c.Status = ""
		}
		if _, err := m.Apply(ctx, fakenode.Fault{Action: action, Target: fakenode.Target{Nodes: nodes}, Condition: c}); err != nil {
			t.Fatal(err)
		}
	}
	// The storm before any controller runs: no repair starts in it.
	deadlock(fakenode.SetCondition, names[0], names[1])
	framework.Eventually(t, time.Minute, "two nodes unhealthy", func(ctx context.Context) (bool, string, error) {
		n := 0
		for _, name := range names[:2] {
			node := getNode(t, client, name)
			for _, c := range node.Status.Conditions {
				if c.Type == "KernelDeadlock" && c.Status == v1.ConditionTrue && time.Since(c.LastTransitionTime.Time) > 4*time.Second {
					n++
				}
			}
		}
		return n == 2, fmt.Sprint(n), nil
	})
	cfg := controllers.Default()
	run := func() *framework.NodeShepherd {
		return framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	}
	first := run()
	cooling := func(node string) int32 {
		_, msgs := eventCount(t, client, node, ctrl.EventBlocked, 0)
		var n int32
		for _, msg := range msgs {
			if strings.Contains(msg, "unhealthy, limit 1") {
				n++
			}
		}
		return n
	}
	framework.Eventually(t, 2*time.Minute, names[0]+" blocked by the storm", func(ctx context.Context) (bool, string, error) {
		return cooling(names[0]) > 0, "", nil
	})
	// The storm ends: one node heals; the other must wait out the cooldown.
	deadlock(fakenode.ClearCondition, names[1])
	framework.Eventually(t, 2*time.Minute, names[0]+" blocked by the cooldown", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, client, names[0], ctrl.EventBlocked, 0)
		return strings.Contains(strings.Join(msgs, "\n"), "cooling down"), strings.Join(msgs, "\n"), nil
	})
	framework.Eventually(t, time.Minute, "the storm's end in the policy's status", func(ctx context.Context) (bool, string, error) {
		u, err := policies.Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ended, _, _ := unstructured.NestedString(u.Object, "status", "stormEnded")
		storm, _, _ := unstructured.NestedBool(u.Object, "status", "storm")
		return ended != "" && !storm, fmt.Sprint(u.Object["status"]), nil
	})
	first.Stop() // the leader goes mid-cooldown
	before, _ := eventCount(t, client, names[0], ctrl.EventBlocked, 0)
	run()
	framework.Eventually(t, 2*time.Minute, "the new process holds "+names[0]+" back for the cooldown", func(ctx context.Context) (bool, string, error) {
		_, r, ok, err := repairRecord(ctx, client, names[0])
		if err != nil {
			return false, "", err
		}
		if ok {
			return false, "", fmt.Errorf("a new leader started a repair during the cooldown: %+v", r)
		}
		n, msgs := eventCount(t, client, names[0], ctrl.EventBlocked, 0)
		return n > before && strings.Contains(strings.Join(msgs, "\n"), "cooling down"), strings.Join(msgs, "\n"), nil
	})
}
