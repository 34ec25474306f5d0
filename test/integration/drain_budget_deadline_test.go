package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// drainTimes reads the schedule and the end of a node's drain from its
// DrainScheduled condition, as the controller wrote them (its clock, to the
// nanosecond); ended is zero while the drain runs.
func drainTimes(n *v1.Node) (scheduled, ended time.Time, failed bool) {
	c := kube.NodeCondition(n, drain.ConditionDrainScheduled)
	if c == nil {
		return
	}
	field := func(marker string) time.Time {
		_, rest, ok := strings.Cut(c.Message, marker)
		if !ok {
			return time.Time{}
		}
		ts, _, _ := strings.Cut(rest, " ")
		t, _ := time.Parse(time.RFC3339Nano, ts)
		return t
	}
	scheduled = field("Drain activity scheduled ")
	if t := field("| Failed: "); !t.IsZero() {
		return scheduled, t, true
	}
	return scheduled, field("| Completed: "), false
}

// TestDrainBudgetFreedAtDrainDeadline (issue 45, hole 4d, drain part): every
// eviction hangs (the proxy holds the requests until the client gives up).
// Sixteen pods on the first node: each eviction would hold the drain for
// kube.WriteTimeout (15 s), two rounds of eight in parallel. The drain has a
// deadline of its own: it fails at --drain-timeout (5 s) plus the cut's
// slack, not when its calls give up, with DrainFailed and the failure
// counted; its slot of --max-concurrent-drains=1 is given back and the
// second node's drain starts. Never two drains at once.
func TestDrainBudgetFreedAtDrainDeadline(t *testing.T) {
	const timeout = 5 * time.Second
	cp, client := teCluster(t) // API server and etcd; the default ServiceAccount for the pods
	m := framework.StartFakeNodes(t, quietNodes(client, 2))
	names := m.NodeNames()
	first, second := names[0], names[1]
	waitNodesReadyOnly(t, client, names...)
	for i := range 16 {
		createPod(t, client, fmt.Sprintf("stuck-%d", i), first, nil)
	}
	watch := watchCordons(t, client)

	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	proxy.Inject(framework.FaultRule{Name: "hang-evictions", Methods: []string{http.MethodPost}, Resource: "pods", Subresource: "eviction",
		Kind: framework.FaultHangUnsent})
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), budgetDrainConfig(func(d *drain.Config) {
		d.Budget.MaxConcurrentDrains = 1
		d.DrainTimeout = timeout
		d.RetryBackoff = time.Hour // the failed node does not take the slot again
		d.EvictUnreplicatedPods = true
		d.StartHold = 0 // one process: no previous leader's write in flight
	}), func(o *manager.Options) { o.Controllers = []string{drain.Name} })

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, first)
	framework.Eventually(t, time.Minute, first+"'s drain in flight, its evictions held", func(ctx context.Context) (bool, string, error) {
		return proxy.Injected("hang-evictions") > 0, proxy.String(), watch.check(0, 1)
	})
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, second)
	framework.Eventually(t, 2*time.Minute, first+"'s drain failed", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(0, 1); err != nil {
			return false, "", err
		}
		return drainCondition(client, first, v1.ConditionFalse, "| Failed: ")(ctx)
	})
	scheduled, ended, failed := drainTimes(getNode(t, client, first))
	// At its own deadline, not when its calls give up: the failure is
	// stamped before the first held eviction could have given up
	// (kube.WriteTimeout after it reached the proxy), and not before
	// --drain-timeout. These order the controller's stamps and the proxy's
	// instead of bounding the test's view: what is left to chance is the
	// failure's write lagging the cut (10 s after the drain's start) by 5 s
	// more than the first eviction lags the start.
	var firstHeld time.Time
	for _, r := range proxy.Log() {
		if r.Fault == "hang-evictions" && (firstHeld.IsZero() || r.At.Before(firstHeld)) {
			firstHeld = r.At
		}
	}
	gaveUp := firstHeld.Add(kube.WriteTimeout)
	t.Logf("%s's drain scheduled at %s, first eviction held at +%v, failed at +%v (failed %v)", first, scheduled.Format(time.RFC3339Nano),
		firstHeld.Sub(scheduled).Round(time.Millisecond), ended.Sub(scheduled).Round(time.Millisecond), failed)
	switch {
	case !failed || firstHeld.IsZero():
		t.Errorf("%s's drain: failed %v, first held eviction at %v; want a failure after held evictions", first, failed, firstHeld)
	case !ended.Before(gaveUp):
		t.Errorf("%s's drain failed at %s, not before its first held eviction gave up (%s): ended by its calls, not its deadline (--drain-timeout=%v)",
			first, ended.Format(time.RFC3339Nano), gaveUp.Format(time.RFC3339Nano), timeout)
	case ended.Before(scheduled.Add(timeout)):
		t.Errorf("%s's drain failed %v after its schedule, before --drain-timeout=%v", first, ended.Sub(scheduled), timeout)
	}
	_, msgs := framework.WaitEvents(t, client, nodeEvents(first, drain.EventDrainFailed), 1)
	if !strings.Contains(strings.Join(msgs, "\n"), "--drain-timeout=5s") {
		t.Errorf("DrainFailed %q does not name the timeout", msgs)
	}
	if got := ns.Metric(t, "draino_drained_nodes_total", map[string]string{"result": "failed"}); got < 1 {
		t.Errorf("draino_drained_nodes_total{failed} = %v, want 1", got)
	}
	// The slot is free: the second node (no pods) is drained.
	framework.Eventually(t, time.Minute, second+" drained once the slot is free", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(0, 1); err != nil {
			return false, "", err
		}
		return drainCondition(client, second, v1.ConditionFalse, "| Completed: ")(ctx)
	})
	if err := watch.check(0, 1); err != nil {
		t.Fatal(err)
	}
}
