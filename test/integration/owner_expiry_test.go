package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner/janitor"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestOrphanedOwnerRecordsExpire (issue 46 point 5): what the drain and
// remediation controllers leave when they no longer run is lifted once its
// record expires, by a nodeshepherd process that runs neither (here
// nodelifecycle alone, as deploy/'s ServiceAccount bound to its role only):
// the drain's cordon whose record expired (uncordoned, the record gone),
// the drain's cordon whose record expires later (left until then), the
// remediation's taint and repair record (gone, a person's taint beside them
// kept), each with an OwnerRecordExpired event and the metric; a person's
// cordon and taint, and a record without an expiry, are never touched.
// Then the drain runs too: it renews its own cordon's record, expired or
// not, rather than see it lifted; it lifts at once the cordon it held for
// a repair whose record expired (the remediation controller does not run);
// and it leaves alone the cordon a person put back on a node whose drain
// cordon was lifted.
func TestOrphanedOwnerRecordsExpire(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 5, false))
	names := m.NodeNames()
	orphan, later, repair, person, live := names[0], names[1], names[2], names[3], names[4]
	for _, n := range names {
		framework.Eventually(t, 60*time.Second, n+" Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue))
	}

	// Left by controllers that no longer run, written as they write them.
	now := time.Now()
	byDrain := func(expires time.Time) func(*v1.Node) {
		return func(n *v1.Node) {
			n.Spec.Unschedulable = true
			setAnnotations(n, map[string]string{drain.AnnotationConditions: "KernelDeadlock=True,3s",
				drain.AnnotationCordonedAt: now.Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)})
			owner.Set(n, owner.Cordon, owner.Record{Controller: drain.Name, Why: "drain rules matched: KernelDeadlock=True,3s",
				Since: now.Add(-2 * time.Hour), Until: "no drain rule's condition has held for --uncordon-after", Expires: &expires})
		}
	}
	expired := now.Add(-time.Minute)
	// Far enough that the process is running and has looked at every node
	// well before, on a busy machine too.
	laterExpiry := now.Add(45 * time.Second).Truncate(time.Second)
	framework.UpdateNode(t, client, orphan, byDrain(expired))
	framework.UpdateNode(t, client, later, byDrain(laterExpiry))
	degraded := v1.Taint{Key: "example.com/degraded", Effect: v1.TaintEffectNoSchedule}
	maintenance := v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoSchedule}
	fenced := v1.Taint{Key: "example.com/fenced", Effect: v1.TaintEffectNoSchedule}
	framework.UpdateNode(t, client, repair, func(n *v1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, maintenance, degraded)
		owner.Set(n, owner.TaintKey(degraded), owner.Record{Controller: "remediation", Why: "remediation policy gpu, step 1: KernelDeadlock=True",
			Since: now.Add(-3 * time.Hour), Until: "the node is healthy for 10m0s (policy gpu)", Expires: &expired})
		setAnnotations(n, map[string]string{remediation.AnnotationState: remediation.EncodeState("gpu", remediation.ActionDrain,
			remediation.State{Step: 1, StepSince: now.Add(-2 * time.Hour), RepairSince: now.Add(-3 * time.Hour), Drain: true})})
		remediation.SetRecordExpiry(n, expired)
	})
	// A person's cordon and taint, and a taint whose record has no expiry.
	framework.UpdateNode(t, client, person, func(n *v1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, maintenance, fenced)
		owner.Set(n, owner.TaintKey(fenced), owner.Record{Controller: "outofservice", Why: "machine confirmed dead", Since: now.Add(-3 * time.Hour)})
	})

	conf := fastLifecycle(100)
	ns := framework.StartNodeShepherd(t, cfg, conf, func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name} })

	framework.Eventually(t, time.Minute, orphan+" uncordoned, its record gone", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, orphan, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, rec := owner.Of(n, owner.Cordon)
		return !n.Spec.Unschedulable && !rec, fmt.Sprintf("unschedulable=%v owners=%s", n.Spec.Unschedulable, n.Annotations[owner.Annotation]), nil
	})
	expectExpired(t, client, orphan, `Lifted the cordon of controller drain (record "cordon"): its record expired at `+expired.UTC().Format(time.RFC3339))
	framework.Eventually(t, time.Minute, repair+": the remediation's taint and repair record gone", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, repair, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, rec := owner.Of(n, owner.TaintKey(degraded))
		_, state := n.Annotations[remediation.AnnotationState]
		return !hasTaint(n, degraded) && !rec && !state, fmt.Sprintf("taints=%v annotations=%v", n.Spec.Taints, n.Annotations), nil
	})
	expectExpired(t, client, repair, "Lifted the taint example.com/degraded:NoSchedule of controller remediation", "Lifted the repair record "+remediation.AnnotationState+" of controller remediation")
	if n := getNode(t, client, repair); !hasTaint(n, maintenance) {
		t.Errorf("%s: the person's taint went with the remediation's: %v", repair, n.Spec.Taints)
	}

	// The later orphan's cordon stays until its record expires.
	if n := getNode(t, client, later); time.Now().Before(laterExpiry.Add(-5*time.Second)) && !n.Spec.Unschedulable {
		t.Errorf("%s was uncordoned before its record expired at %s", later, laterExpiry)
	}
	framework.Eventually(t, 2*time.Minute, later+" uncordoned at its expiry", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, later, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return !n.Spec.Unschedulable, fmt.Sprintf("unschedulable=%v owners=%s", n.Spec.Unschedulable, n.Annotations[owner.Annotation]), nil
	})
	if at := expectExpired(t, client, later, `Lifted the cordon of controller drain (record "cordon")`); at.Before(laterExpiry) {
		t.Errorf("%s: lifted at %s, before its record expired at %s", later, at, laterExpiry)
	}

	// Every node has been looked at: the person's are as they were.
	n := getNode(t, client, person)
	if !n.Spec.Unschedulable || !hasTaint(n, maintenance) || !hasTaint(n, fenced) {
		t.Errorf("%s: a person's cordon or taint, or a record without an expiry, was touched: unschedulable=%v taints=%v", person, n.Spec.Unschedulable, n.Spec.Taints)
	}
	if r, ok := owner.Of(n, owner.TaintKey(fenced)); !ok || r.Controller != "outofservice" {
		t.Errorf("%s: the record without an expiry went: %s", person, n.Annotations[owner.Annotation])
	}
	for _, c := range []struct {
		controller, kind string
		want             float64
	}{{drain.Name, janitor.KindCordon, 2}, {"remediation", janitor.KindTaint, 1}, {"remediation", janitor.KindRepair, 1}} {
		if got := ns.Metric(t, "nodeshepherd_owner_records_expired_total", map[string]string{"controller": c.controller, "record": c.kind}); got != c.want {
			t.Errorf("nodeshepherd_owner_records_expired_total{controller=%q,record=%q} = %v, want %v", c.controller, c.kind, got, c.want)
		}
	}
	ns.Stop()

	// The drain runs again, next to nodelifecycle (the janitor's carrier,
	// as in deploy/), and a person has cordoned the first orphan again
	// (the drain's annotations are still on it).
	framework.SetUnschedulable(t, client, orphan, true)
	ns = framework.StartNodeShepherd(t, cfg, drainConfig(nil), func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name, drain.Name} })
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, live)
	started := time.Now()
	var rec owner.Record
	framework.Eventually(t, time.Minute, live+" cordoned by the drain, its record expiring in an hour", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, live, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		var ok bool
		rec, ok = owner.Of(n, owner.Cordon)
		return n.Spec.Unschedulable && ok && rec.Controller == drain.Name && rec.Expires != nil, fmt.Sprintf("unschedulable=%v owners=%s", n.Spec.Unschedulable, n.Annotations[owner.Annotation]), nil
	})
	if lo, hi := started.Add(owner.Lease).Truncate(time.Second), time.Now().Add(owner.Lease+time.Second); rec.Expires.Before(lo) || rec.Expires.After(hi) {
		t.Errorf("the drain's record expires at %s, want an hour after the cordon, in [%s, %s]", rec.Expires, lo, hi)
	}
	// Its record expired (as if the drain had been away): renewed, not lifted.
	framework.UpdateNode(t, client, live, func(n *v1.Node) {
		r, _ := owner.Of(n, owner.Cordon)
		past := time.Now().Add(-time.Minute)
		r.Expires = &past
		owner.Set(n, owner.Cordon, r)
	})
	edited := time.Now()
	framework.Eventually(t, time.Minute, live+"'s record renewed", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, live, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, ok := owner.Of(n, owner.Cordon)
		return n.Spec.Unschedulable && ok && r.Expires != nil && !r.Expires.Before(edited.Add(owner.Lease).Truncate(time.Second)),
			fmt.Sprintf("unschedulable=%v owners=%s", n.Spec.Unschedulable, n.Annotations[owner.Annotation]), nil
	})
	// A repair asks the drain for a drain; the drain cordons for it. Then
	// the remediation controller stops renewing the repair record (it does
	// not run here): once expired, the record goes, and the drain lifts the
	// cordon it held for it at once.
	framework.UpdateNode(t, client, repair, func(n *v1.Node) {
		setAnnotations(n, map[string]string{remediation.AnnotationState: remediation.EncodeState("gpu", remediation.ActionDrain,
			remediation.State{Step: 1, StepSince: time.Now(), RepairSince: time.Now().Add(-time.Minute), Drain: true})})
	})
	framework.Eventually(t, time.Minute, repair+" cordoned for the repair", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, repair, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Spec.Unschedulable && n.Annotations[drain.AnnotationRequest] != "", fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	framework.UpdateNode(t, client, repair, func(n *v1.Node) { remediation.SetRecordExpiry(n, time.Now().Add(-time.Second)) })
	framework.Eventually(t, time.Minute, repair+": the expired repair record gone, the drain's cordon for it lifted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, repair, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, state := n.Annotations[remediation.AnnotationState]
		return !state && !n.Spec.Unschedulable && !ownedByDrain(n), fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	framework.WaitEvents(t, client, nodeEvents(repair, janitor.EventExpired), 3) // two in the first run
	if _, msgs := framework.WaitEvents(t, client, nodeEvents(repair, drain.EventUncordonStarting), 1); !strings.Contains(msgs[0], "the remediation's repair ended (remediation policy gpu, step 2 (Drain))") {
		t.Errorf("UncordonStarting says %q", msgs[0])
	}

	// The person's cordon on the first orphan: the drain forgets the node
	// and leaves the cordon.
	framework.Eventually(t, time.Minute, orphan+" forgotten by the drain", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, orphan, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return !ownedByDrain(n), fmt.Sprintf("annotations=%v", n.Annotations), nil
	})
	if n := getNode(t, client, orphan); !n.Spec.Unschedulable {
		t.Errorf("%s: the drain lifted the person's cordon", orphan)
	}
	for _, c := range []struct{ node, reason string }{{orphan, drain.EventUncordonStarting}, {live, janitor.EventExpired}, {person, janitor.EventExpired}} {
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(framework.Context(t), metav1.ListOptions{FieldSelector: nodeEvents(c.node, c.reason)})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			t.Errorf("%s: %s %q", c.node, c.reason, evs.Items[0].Message)
		}
	}
	if got := ns.Metric(t, "nodeshepherd_owner_records_expired_total", map[string]string{"controller": drain.Name}); got != 0 {
		t.Errorf("the process that runs the drain lifted %v of its records", got)
	}
	if got := ns.Metric(t, "nodeshepherd_owner_records_expired_total", map[string]string{"controller": "remediation", "record": janitor.KindRepair}); got != 1 {
		t.Errorf("%v repair records lifted, want 1", got)
	}
}

func setAnnotations(n *v1.Node, kv map[string]string) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range kv {
		n.Annotations[k] = v
	}
}

func hasTaint(n *v1.Node, t v1.Taint) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(x v1.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect })
}

// expectExpired waits for one OwnerRecordExpired event on the node per
// prefix, each saying it, and returns when the last was first seen.
func expectExpired(t *testing.T, client kubernetes.Interface, node string, prefixes ...string) time.Time {
	t.Helper()
	framework.WaitEvents(t, client, nodeEvents(node, janitor.EventExpired), int32(len(prefixes)))
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(framework.Context(t), metav1.ListOptions{FieldSelector: nodeEvents(node, janitor.EventExpired)})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != len(prefixes) {
		t.Errorf("%s: %d %s events, want %d", node, len(evs.Items), janitor.EventExpired, len(prefixes))
	}
	var last time.Time
	for _, p := range prefixes {
		found := false
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Message, p) && strings.Contains(e.Message, "does not run in this process") && e.Type == v1.EventTypeWarning {
				found = true
				if e.FirstTimestamp.After(last) {
					last = e.FirstTimestamp.Time
				}
			}
		}
		if !found {
			t.Errorf("%s: no %s event saying %q", node, janitor.EventExpired, p)
		}
	}
	return last
}
