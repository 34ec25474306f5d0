package integration

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// cordonWatch follows the Nodes through the test's own client (never through
// a fault proxy) and keeps the most nodes it ever saw cordoned by the drain
// controller at once, and the most with a drain in flight
// (DrainScheduled=True): every event is one object's change, so counting the
// store after each one sees every state the API server went through.
type cordonWatch struct {
	mu                      sync.Mutex
	mostCordoned, mostDrain int
	whenCordoned, whenDrain string // the nodes at the worst moment
	store                   cache.Store
}

func watchCordons(t *testing.T, client kubernetes.Interface) *cordonWatch {
	t.Helper()
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Nodes().Informer()
	w := &cordonWatch{store: inf.GetStore()}
	count := func(any) { w.count() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, n any) { count(n) }, DeleteFunc: count}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(framework.Context(t))
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("node watch did not sync")
	}
	return w
}

func (w *cordonWatch) count() {
	var cordoned, draining []string
	for _, o := range w.store.List() {
		n := o.(*v1.Node)
		if !ownedByDrain(n) || !n.Spec.Unschedulable {
			continue
		}
		cordoned = append(cordoned, n.Name)
		for _, c := range n.Status.Conditions {
			if c.Type == drain.ConditionDrainScheduled && c.Status == v1.ConditionTrue {
				draining = append(draining, n.Name)
			}
		}
	}
	sort.Strings(cordoned)
	sort.Strings(draining)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(cordoned) > w.mostCordoned {
		w.mostCordoned, w.whenCordoned = len(cordoned), strings.Join(cordoned, ", ")
	}
	if len(draining) > w.mostDrain {
		w.mostDrain, w.whenDrain = len(draining), strings.Join(draining, ", ")
	}
}

// check fails the test when more nodes were ever cordoned, or draining, at
// once than the budgets allow (0: not checked).
func (w *cordonWatch) check(maxCordoned, maxDrains int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if maxCordoned > 0 && w.mostCordoned > maxCordoned {
		return fmt.Errorf("%d nodes cordoned by the drain controller at once (%s) with --max-cordoned-nodes=%d", w.mostCordoned, w.whenCordoned, maxCordoned)
	}
	if maxDrains > 0 && w.mostDrain > maxDrains {
		return fmt.Errorf("%d drains in flight at once (%s) with --max-concurrent-drains=%d", w.mostDrain, w.whenDrain, maxDrains)
	}
	return nil
}

// budgetDrainConfig is the drain controller alone (no node lifecycle: the
// fake kubelets keep their nodes Ready), rules KernelDeadlock=True,1s.
func budgetDrainConfig(mut func(*drain.Config)) controllers.Config {
	c := controllers.Default()
	d := &c.Drain
	d.Conditions = []string{"KernelDeadlock=True,1s"}
	d.UncordonAfter, d.RetryBackoff, d.DrainTimeout, d.MaxGracePeriod = time.Second, 2*time.Second, 30*time.Second, 5*time.Second
	d.ResyncPeriod = time.Hour
	d.Budget.MaxConcurrentDrains, d.Budget.MaxCordonedNodes = 0, ""
	if mut != nil {
		mut(d)
	}
	return c
}

// quietNodes are fake nodes that post their status only when it changes, so
// that a write carrying a node's resourceVersion is not refused because the
// kubelet wrote meanwhile.
func quietNodes(client kubernetes.Interface, n int) fakenode.Config {
	c := fastNodes(client, n, false)
	c.NodeStatusReportFrequency = time.Hour
	return c
}

// waitNodesReadyOnly waits for the nodes' Ready=True (no node lifecycle
// controller runs here to lift the not-ready taint they register with;
// the drain controller looks at Ready only).
func waitNodesReadyOnly(t *testing.T, client kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		framework.Eventually(t, time.Minute, n+" Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue))
	}
}

// otherNode is the name in names that is not name.
func otherNode(names []string, name string) string {
	for _, n := range names {
		if n != name {
			return n
		}
	}
	return ""
}

// TestDrainBudgetCountsLostCordon (issue 45, hole 4c): two nodes match,
// --max-cordoned-nodes=1. The controller's node watch is held open without
// events and the answer to its first cordon is lost (the proxy forwards the
// cordon, which lands, and withholds the answer until the client gives up).
// The cordon whose answer was lost counts against the budget until a read
// settles it: the other node waits (CordonWaiting naming the budget), and is
// cordoned only once the first is uncordoned. At no moment are two nodes
// cordoned by the controller.
func TestDrainBudgetCountsLostCordon(t *testing.T) {
	// Long enough for the node watch to be held before any cordon.
	const minDuration = 45 * time.Second
	cp, client := teCluster(t) // API server and etcd; the default ServiceAccount for the pods
	m := framework.StartFakeNodes(t, quietNodes(client, 2))
	names := m.NodeNames()
	waitNodesReadyOnly(t, client, names...)
	watch := watchCordons(t, client)

	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	proxy.Inject(framework.FaultRule{Name: "lose-cordon-answer", Methods: []string{http.MethodPatch}, Resource: "nodes", Subresource: "-",
		Kind: framework.FaultHang, Times: 1})
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, names...)
	matched := time.Now()
	framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), budgetDrainConfig(func(d *drain.Config) {
		d.Conditions = []string{"KernelDeadlock=True," + minDuration.String()}
		d.Budget.MaxCordonedNodes = "1"
	}), func(o *manager.Options) { o.Controllers = []string{drain.Name} })
	// The controller's node watch is held open without events from now on
	// (its first watch, which lists, is cut once synced): it never hears of
	// the cordon. The conditions are in its cache; timers cordon.
	stall := proxy.Inject(framework.FaultRule{Name: "stall-node-watch", Resource: "nodes", Watch: true, ResumeOnly: true, Kind: framework.FaultStall})
	proxy.DropWatches()
	framework.Eventually(t, time.Minute, "the controller's node watch held open without events", func(context.Context) (bool, string, error) {
		return proxy.Injected("stall-node-watch") >= 1, proxy.String(), nil
	})
	if since := time.Since(matched); since >= minDuration || proxy.Injected("lose-cordon-answer") > 0 {
		t.Fatalf("the node watch was held %v after the nodes matched (cordons due at %v): too slow to exercise", since, minDuration)
	}

	var first string
	framework.Eventually(t, 2*time.Minute, "a cordon forwarded and its answer withheld", func(context.Context) (bool, string, error) {
		for _, e := range proxy.Log() {
			if e.Fault == "lose-cordon-answer" && e.Reached {
				first = e.Name
				return true, "", nil
			}
		}
		return false, proxy.String(), watch.check(1, 0)
	})
	second := otherNode(names, first)
	t.Logf("cordon of %s landed, its answer withheld; %s must wait", first, second)
	framework.Eventually(t, 30*time.Second, first+" cordoned (the write landed)", func(ctx context.Context) (bool, string, error) {
		n := getNode(t, client, first)
		return n.Spec.Unschedulable && ownedByDrain(n), "", watch.check(1, 0)
	})
	// The client gives up after kube.WriteTimeout; then the other node is
	// decided on, against a budget that must count the first.
	framework.Eventually(t, 2*time.Minute, second+" waits on --max-cordoned-nodes", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(1, 0); err != nil {
			return false, "", err
		}
		_, msgs := eventsNow(ctx, client, nodeEvents(second, drain.EventCordonWaiting))
		return strings.Contains(strings.Join(msgs, "\n"), "--max-cordoned-nodes=1"), fmt.Sprintf("events %q", msgs), nil
	})
	// The first node's lost write is settled by a read, its drain runs and
	// ends (no pods), and the waiting node is looked at again: it still
	// waits, the informer being still held.
	framework.Eventually(t, time.Minute, "drain of "+first+" completed", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(1, 0); err != nil {
			return false, "", err
		}
		return drainCondition(client, first, v1.ConditionFalse, "| Completed: ")(ctx)
	})
	// Release the watch: the informer catches up, nothing changes.
	proxy.Stop(stall)
	proxy.DropWatches()
	// The budget frees when the first node is uncordoned; then the second
	// is cordoned.
	setCondition(t, m, fakenode.ClearCondition, "", first)
	framework.Eventually(t, time.Minute, first+" uncordoned, then "+second+" cordoned", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(1, 0); err != nil {
			return false, "", err
		}
		a, b := getNode(t, client, first), getNode(t, client, second)
		return !ownedByDrain(a) && ownedByDrain(b) && b.Spec.Unschedulable, fmt.Sprintf("%s owned=%v, %s owned=%v", first, ownedByDrain(a), second, ownedByDrain(b)), nil
	})
	if err := watch.check(1, 0); err != nil {
		t.Fatal(err)
	}
}

// eventsNow lists the events matching the field selector now: their
// number and messages.
func eventsNow(ctx context.Context, client kubernetes.Interface, selector string) (int, []string) {
	l, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return 0, nil
	}
	var msgs []string
	for _, e := range l.Items {
		msgs = append(msgs, e.Message)
	}
	return len(l.Items), msgs
}
