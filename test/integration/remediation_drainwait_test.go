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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// drainThenReboot: a short Drain step, then a Reboot.
var drainThenReboot = deadlockPolicy("wait", "wait", "", "{action: Drain, timeout: 10s}", "{action: Reboot, timeout: 10m}")

// drainWaitRig starts the rig with kube-controller-manager (the budgets'
// status), a pod of app web on the first node, the drain and remediation
// controllers with the fake cloud (drain settings from mut), and makes the
// first node unhealthy. Everything is in place before the controllers start.
func drainWaitRig(t *testing.T, pdb bool, mut func(*drain.Config), prep func(remediationRig)) (rig remediationRig, sick, boot string) {
	t.Helper()
	rig = startRemediationRigOn(t, controlplane.Config{ControllerManager: true}, drainThenReboot, "wait", 2, 2*time.Second)
	sick = rig.names[0]
	ctx := framework.Context(t)
	webPodReady(t, rig, sick)
	if pdb {
		createPDB(t, rig.client, "web", ptr.To(intstr.FromInt32(1)), nil) // no disruption allowed
	}
	boot = getNode(t, rig.client, sick).Status.NodeInfo.BootID
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	d := &cfg.Drain
	d.EvictUnreplicatedPods = true // web-0 has no controller
	d.DrainTimeout, d.MaxGracePeriod, d.RetryBackoff = 20*time.Second, 2*time.Second, 2*time.Second
	d.StartHold = 0
	if mut != nil {
		mut(d)
	}
	if prep != nil {
		prep(rig)
	}
	framework.StartNodeShepherd(t, rig.cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	c := &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}
	if _, err := rig.m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{sick}}, Condition: c}); err != nil {
		t.Fatal(err)
	}
	return rig, sick, boot
}

// webPodReady creates pod web-0 of app web on node and waits until it is
// Ready.
func webPodReady(t *testing.T, rig remediationRig, node string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	// kube-controller-manager creates the ServiceAccount "default" that
	// admission wants, a moment after it starts.
	framework.Eventually(t, time.Minute, "web-0 created", func(ctx context.Context) (bool, string, error) {
		_, err := rig.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
	})
	framework.Eventually(t, time.Minute, "web-0 Ready", podReadyIs(rig.client, "web-0", v1.ConditionTrue))
}

// waitsAtDrain waits until the node is held at its Drain step, visibly (a
// RemediationBlocked event and the policy's status saying what the drain
// waits for, with want in both), and checks that it was not rebooted.
func waitsAtDrain(t *testing.T, rig remediationRig, sick, boot, want string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, sick+" held at its Drain step, said in an event", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, rig.client, sick, ctrl.EventBlocked, 0)
		for _, m := range msgs {
			if strings.Contains(m, remediation.WaitingForDrain) && strings.Contains(m, want) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%s events %q", ctrl.EventBlocked, msgs), nil
	})
	framework.Eventually(t, time.Minute, "policy wait's status says the wait", func(ctx context.Context) (bool, string, error) {
		repairs, err := policyRepairs(ctx, rig.policies, "wait")
		if err != nil {
			return false, "", err
		}
		for _, r := range repairs {
			if r["node"] == sick && strings.Contains(fmt.Sprint(r["next"]), remediation.WaitingForDrain) && strings.Contains(fmt.Sprint(r["next"]), want) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("repairs %v", repairs), nil
	})
	n, r, ok, err := repairRecord(framework.Context(t), rig.client, sick)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.BootID != boot || !ok || r.Step != 0 || r.Action != remediation.ActionDrain {
		t.Fatalf("%s past its Drain step's timeout with the drain not done: boot %s (was %s), record %+v (in repair %v); want it still at the Drain step, not rebooted",
			sick, n.Status.NodeInfo.BootID, boot, r, ok)
	}
}

// rebooted waits for the Reboot step to have run on the node.
func rebooted(t *testing.T, rig remediationRig, sick, boot string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, sick+" rebooted by step 2", func(ctx context.Context) (bool, string, error) {
		n, r, ok, err := repairRecord(ctx, rig.client, sick)
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != boot, fmt.Sprintf("boot %s, record %+v (in repair %v)", n.Status.NodeInfo.BootID, r, ok), nil
	})
}

// A Reboot after a Drain step waits while a PodDisruptionBudget keeps the
// drain from evicting a pod (issue 46 point 2): past the Drain step's
// timeout the node stays at it, an event and the policy's status name the
// budget, and the machine is not rebooted; once the budget is gone the
// drain completes and the Reboot runs.
func TestRemediationRebootWaitsForDrainHeldByPDB(t *testing.T) {
	rig, sick, boot := drainWaitRig(t, true, nil, nil)
	waitsAtDrain(t, rig, sick, boot, "PodDisruptionBudget default/web (0 disruptions allowed): web-0")
	if err := rig.client.PolicyV1().PodDisruptionBudgets("default").Delete(framework.Context(t), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "web-0 evicted", func(ctx context.Context) (bool, string, error) {
		_, err := rig.client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	rebooted(t, rig, sick, boot)
}

// A Reboot after a Drain step follows the drain's own escalation (issue 46
// point 2): with --drain-force-after the drain deletes the pod its budget
// refused for that long without a break (a Warning event), completes, and
// only then the Reboot runs. Before that the node waits at its Drain step
// past the step's timeout, as without the escalation.
func TestRemediationRebootAfterDrainForcedPastPDB(t *testing.T) {
	rig, sick, boot := drainWaitRig(t, true, func(d *drain.Config) { d.ForceAfter = rules.MinForceAfter }, nil)
	waitsAtDrain(t, rig, sick, boot, "PodDisruptionBudget default/web (0 disruptions allowed): web-0")
	framework.Eventually(t, 2*rules.MinForceAfter, "web-0 deleted by the drain's escalation", func(ctx context.Context) (bool, string, error) {
		_, err := rig.client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	if got, msgs := eventCount(t, rig.client, sick, drain.EventDrainForceDeleted, 1); got < 1 {
		t.Errorf("web-0 gone without a %s event: %q", drain.EventDrainForceDeleted, msgs)
	}
	rebooted(t, rig, sick, boot)
}

// A Reboot after a Drain step waits while the drain's maintenance window
// keeps the drain from starting: the pods stay, and so does the machine.
func TestRemediationRebootWaitsForDrainOutsideWindow(t *testing.T) {
	// A window that is closed now: a minute a week, two days from now.
	day := time.Now().UTC().Add(48 * time.Hour).Weekday().String()[:3]
	rig, sick, boot := drainWaitRig(t, false, func(d *drain.Config) {
		d.Windows = []string{day + " 00:00-00:01"}
	}, nil)
	waitsAtDrain(t, rig, sick, boot, "the drain not started")
	if _, err := rig.client.CoreV1().Pods("default").Get(framework.Context(t), "web-0", metav1.GetOptions{}); err != nil {
		t.Errorf("web-0 gone while the drain's window was closed: %v", err)
	}
}

// A Reboot after a Drain step waits while the drain's own budget holds the
// drain back (here the drain buffer: another node's drain started a moment
// ago, --drain-buffer 1h): the pods stay, and so does the machine.
func TestRemediationRebootWaitsForDrainHeldByBudget(t *testing.T) {
	rig, sick, boot := drainWaitRig(t, false, func(d *drain.Config) { d.Budget.DrainBuffer = time.Hour }, func(rig remediationRig) {
		framework.UpdateNode(t, rig.client, rig.names[1], func(n *v1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[drain.AnnotationDrainStarted] = time.Now().UTC().Format(time.RFC3339Nano)
		})
	})
	waitsAtDrain(t, rig, sick, boot, "the drain not started")
	if _, err := rig.client.CoreV1().Pods("default").Get(framework.Context(t), "web-0", metav1.GetOptions{}); err != nil {
		t.Errorf("web-0 gone while the drain buffer held the drain: %v", err)
	}
}

// A step that disrupts pods with no Drain step before it (here a lone
// Reboot) first evicts, through the Eviction API, the node's pods that a
// PodDisruptionBudget protects, and waits while the budget refuses (found
// by the chaos seed 2 of make test: a Replace deleted a pod whose budget
// allowed no disruption): the node is not rebooted, an event names the
// budget; once the budget allows it, the pod is evicted and the Reboot
// runs.
func TestRemediationDisruptiveStepEvictsProtectedPodsFirst(t *testing.T) {
	rig := startRemediationRigOn(t, controlplane.Config{ControllerManager: true},
		deadlockPolicy("evict", "evict", "", "{action: Reboot, timeout: 10m}"), "evict", 2, 2*time.Second)
	sick := rig.names[0]
	ctx := framework.Context(t)
	webPodReady(t, rig, sick)
	createPDB(t, rig.client, "web", ptr.To(intstr.FromInt32(1)), nil) // no disruption allowed
	boot := getNode(t, rig.client, sick).Status.NodeInfo.BootID
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	framework.StartNodeShepherd(t, rig.cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{ctrl.Name} })
	c := &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}
	if _, err := rig.m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{sick}}, Condition: c}); err != nil {
		t.Fatal(err)
	}
	want := "pod default/web-0 (PodDisruptionBudget default/web)"
	framework.Eventually(t, 2*time.Minute, sick+" held before its Reboot, said in an event", func(ctx context.Context) (bool, string, error) {
		_, msgs := eventCount(t, rig.client, sick, ctrl.EventBlocked, 0)
		for _, m := range msgs {
			if strings.Contains(m, remediation.WaitingForEvictions) && strings.Contains(m, want) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%s events %q", ctrl.EventBlocked, msgs), nil
	})
	n, r, ok, err := repairRecord(ctx, rig.client, sick)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.BootID != boot || ok {
		t.Fatalf("%s rebooted or in repair while its eviction was refused: boot %s (was %s), record %+v (in repair %v)", sick, n.Status.NodeInfo.BootID, boot, r, ok)
	}
	if _, err := rig.client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("web-0 gone while its budget allowed no disruption: %v", err)
	}
	// The budget now allows the disruption: the pod is evicted (the
	// Eviction API's DisruptionTarget condition says so), then the Reboot.
	framework.Eventually(t, time.Minute, "budget web relaxed", func(ctx context.Context) (bool, string, error) {
		b, err := rig.client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		b.Spec.MinAvailable = ptr.To(intstr.FromInt32(0))
		_, err = rig.client.PolicyV1().PodDisruptionBudgets("default").Update(ctx, b, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
	evicted := false
	framework.Eventually(t, 2*time.Minute, "web-0 evicted", func(ctx context.Context) (bool, string, error) {
		p, err := rig.client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI" {
				evicted = true
			}
		}
		return evicted, fmt.Sprintf("conditions %+v", p.Status.Conditions), nil
	})
	rebooted(t, rig, sick, boot)
}
