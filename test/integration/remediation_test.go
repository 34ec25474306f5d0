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
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// rebootLadder: KernelDeadlock for 2s makes a gpu node unhealthy; a taint,
// then a reboot, then a replacement; one node in repair at a time.
const rebootLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: gpu}
spec:
  nodeSelector: {matchLabels: {pool: gpu}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 2s}
  healthyHold: 8s
  steps:
  - {action: Taint, timeout: 12s, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
  - {action: Reboot, timeout: 30s}
  - {action: Replace, timeout: 5m}
  brakes: {maxInRepair: 1}
`

// The ladder on the real control plane, its writes as deploy/'s
// ServiceAccount: a node whose reboot fixes it is repaired (taint, reboot
// through the fake cloud provider with a request ID, healthy for the hold
// time: done, taint and record gone); a second node, unhealthy meanwhile,
// is blocked by maxInRepair, visibly (event, policy status and condition),
// then repaired once the first is done; its failure survives the reboot, so
// it is replaced.
func TestRemediationRebootThenReplace(t *testing.T) {
	asServiceAccount(t)
	rig := startRemediationRig(t, rebootLadder, "gpu", 3, 2*time.Second)
	cp, client, policies, m, names := rig.cp, rig.client, rig.policies, rig.m, rig.names
	ctx := framework.Context(t)
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	ns := framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })

	deadlock := func(action fakenode.Action, node string) {
		t.Helper()
		c := &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}
		if action == fakenode.ClearCondition {
			c.Status = ""
		}
		if _, err := m.Apply(ctx, fakenode.Fault{Action: action, Target: fakenode.Target{Nodes: []string{node}}, Condition: c}); err != nil {
			t.Fatal(err)
		}
	}
	record := func(node string) (remediation.Request, bool) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return remediation.Request{}, false
		}
		r, ok, _ := remediation.RequestOf(n)
		return r, ok
	}
	taint := v1.Taint{Key: "nodeshepherd.io/unhealthy", Effect: v1.TaintEffectNoSchedule}

	a, b := names[0], names[1]
	deadlock(fakenode.SetCondition, a)
	framework.Eventually(t, time.Minute, a+" tainted at step 1", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, ok, _ := remediation.RequestOf(n)
		rec, owned := owner.Of(n, owner.TaintKey(taint))
		return ok && r.Step == 0 && kube.FindTaint(n, taint) != nil && owned && rec.Controller == ctrl.Name, fmt.Sprintf("%+v %v", r, n.Spec.Taints), nil
	})
	bootA := getNode(t, client, a).Status.NodeInfo.BootID
	// b fails while a is in repair: maxInRepair 1 holds it back.
	deadlock(fakenode.SetCondition, b)
	if n, msgs := eventCount(t, client, b, ctrl.EventBlocked, 1); n < 1 || !strings.Contains(strings.Join(msgs, "\n"), "1 of 3 nodes of pool gpu in repair, limit 1") {
		t.Fatalf("%s: %d %s events: %q", b, n, ctrl.EventBlocked, msgs)
	}
	framework.Eventually(t, time.Minute, "the policy's status shows 1 in repair, 1 blocked", policyStatus(policies, "gpu", func(st remediation.PolicyStatus) bool {
		blocked := false
		for _, c := range st.Conditions {
			blocked = blocked || c.Type == ctrl.ConditionBlocked && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "limit 1")
		}
		return st.Nodes == 3 && st.Unhealthy == 2 && st.InRepair == 1 && st.Blocked == 1 && blocked && len(st.Repairs) == 1 && st.Repairs[0].Node == a
	}))
	if v := ns.Metric(t, "nodeshepherd_remediation_blocked_nodes", map[string]string{"policy": "gpu"}); v != 1 {
		t.Errorf("nodeshepherd_remediation_blocked_nodes = %v, want 1", v)
	}

	// The taint does not fix a: after 12s, the reboot, through the provider.
	framework.Eventually(t, 2*time.Minute, a+" rebooted (a new boot ID)", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != bootA, n.Status.NodeInfo.BootID, nil
	})
	if r, ok := record(a); !ok || r.Action != remediation.ActionReboot {
		t.Fatalf("%s after the reboot: record %+v, %v", a, r, ok)
	}
	deadlock(fakenode.ClearCondition, a) // node-problem-detector on the fresh boot
	framework.Eventually(t, time.Minute, a+" repaired: record and taint gone", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, ok, _ := remediation.RequestOf(n)
		_, owned := owner.Of(n, owner.TaintKey(taint))
		return !ok && kube.FindTaint(n, taint) == nil && !owned, fmt.Sprint(n.Annotations), nil
	})
	if n, _ := eventCount(t, client, a, ctrl.EventDone, 1); n != 1 {
		t.Errorf("%s: %d %s events, want 1", a, n, ctrl.EventDone)
	}

	// b starts once a is done; a reboot does not fix it: replaced.
	oldB := getNode(t, client, b)
	framework.Eventually(t, 2*time.Minute, b+" at the Reboot step", func(ctx context.Context) (bool, string, error) {
		r, ok := record(b)
		return ok && r.Action == remediation.ActionReboot, fmt.Sprintf("%+v", r), nil
	})
	framework.Eventually(t, 2*time.Minute, b+" rebooted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != oldB.Status.NodeInfo.BootID, "", nil
	})
	deadlock(fakenode.SetCondition, b) // the failure survives the reboot
	framework.Eventually(t, 3*time.Minute, b+" replaced: a new Node, no repair record", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			deadlock(fakenode.ClearCondition, b) // the new machine is healthy
			return false, "Node gone", nil
		}
		if err != nil {
			return false, "", err
		}
		_, ok, _ := remediation.RequestOf(n)
		return n.UID != oldB.UID && !ok, fmt.Sprintf("uid %s, annotations %v", n.UID, n.Annotations), nil
	})
	if n, msgs := eventCount(t, client, b, ctrl.EventDone, 1); n != 1 || !strings.Contains(strings.Join(msgs, ""), "repaired by replacement") {
		t.Errorf("%s: %d %s events %q, want one for the replacement", b, n, ctrl.EventDone, msgs)
	}
	for action, want := range map[string]float64{"Reboot": 2, "Replace": 1} {
		if v := ns.Metric(t, "nodeshepherd_remediation_provider_requests_total", map[string]string{"action": action, "result": "accepted"}); v != want {
			t.Errorf("%s requests accepted: %v, want %v", action, v, want)
		}
	}
	if n, _ := eventCount(t, client, names[2], ctrl.EventStarted, 0); n != 0 {
		t.Errorf("the healthy node %s: %d repairs started", names[2], n)
	}
}

// policyStatus waits for the policy's status to satisfy ok.
func policyStatus(policies dynamic.NamespaceableResourceInterface, name string, ok func(remediation.PolicyStatus) bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		u, err := policies.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		b, _ := yaml.Marshal(u.Object["status"])
		var st remediation.PolicyStatus
		if err := yaml.Unmarshal(b, &st); err != nil {
			return false, "", err
		}
		return ok(st), string(b), nil
	}
}
