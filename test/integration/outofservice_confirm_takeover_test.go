package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// confirmWithBoot annotates the node as a person who names the boot does
// (docs/outofservice.md): the confirmation and its boot in one patch.
func confirmWithBoot(t *testing.T, client kubernetes.Interface, node, reason string) {
	t.Helper()
	boot := getNode(t, client, node).Status.NodeInfo.BootID
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, outofservice.AnnotationConfirm, reason, outofservice.AnnotationConfirmationBootID, boot)
	if _, err := client.CoreV1().Nodes().Patch(framework.Context(t), node, "application/merge-patch+json", []byte(patch),
		metav1.PatchOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatal(err)
	}
}

// outOfServiceHigh watches the nodes and keeps the most that carried the
// out-of-service taint at once, until the test ends.
type outOfServiceHigh struct {
	mu      sync.Mutex
	tainted map[string]bool
	most    int
	when    []string // the nodes tainted when most was reached
}

func watchOutOfService(t *testing.T, client kubernetes.Interface) *outOfServiceHigh {
	t.Helper()
	h := &outOfServiceHigh{tainted: map[string]bool{}}
	ctx := framework.Context(t)
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		h.note(&list.Items[i])
	}
	w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*v1.Node); ok && ev.Type != watch.Error {
				if ev.Type == watch.Deleted {
					n = &v1.Node{ObjectMeta: n.ObjectMeta}
				}
				h.note(n)
			}
		}
	}()
	return h
}

func (h *outOfServiceHigh) note(n *v1.Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tainted[n.Name] = kube.HasTaint(n, v1.TaintNodeOutOfService)
	count := 0
	var names []string
	for name, ok := range h.tainted {
		if ok {
			count++
			names = append(names, name)
		}
	}
	if count > h.most {
		slices.Sort(names)
		h.most, h.when = count, names
	}
}

func (h *outOfServiceHigh) max() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most, h.when
}

// TestOutOfServiceBudgetAcrossTakeover (issue 45, hole 4f): a taint
// written by the previous leader that lands after the new leader's first
// list does not take the nodes out of service beyond the budget. The
// budget is 1; two machines are powered off and confirmed dead (their
// boots named), silent long enough. The outofservice controller starts as
// a new leader does (its informer lists both untainted); then the previous
// leader's update of one of them lands: the taint with its boot-ID
// annotation, as that leader writes it. Before the fix the new leader had
// already tainted the other at once, from its list: two nodes out of
// service. Now its first taint waits Config.TakeoverWait after its start
// (kube.WriteTimeout by default; longer here, so that the previous leader's
// write lands well within it on a slow machine) and counts the budget on a
// fresh list: the other node is refused (OutOfServiceBlocked, budget), and
// never more than one node carries the taint.
func TestOutOfServiceBudgetAcrossTakeover(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 1), nil) // node lifecycle, no outofservice
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	slices.Sort(names)
	// The new leader's informer lists, and its queue serves, nodes by
	// name: it looks at first first.
	first, late := names[0], names[1]
	machine(t, m, fakenode.MachineShutdown, first, late)
	for _, n := range []string{first, late} {
		framework.Eventually(t, 30*time.Second, n+" not Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
		confirmWithBoot(t, client, n, "rack power")
	}
	due := kube.NotBefore(readySince(t, client, first)).Add(oosAfter)
	if d := kube.NotBefore(readySince(t, client, late)).Add(oosAfter); d.After(due) {
		due = d
	}
	framework.Eventually(t, 30*time.Second, "both silent for --out-of-service-after", func(context.Context) (bool, string, error) {
		return time.Now().After(due), "due " + due.String(), nil
	})
	high := watchOutOfService(t, client)

	conf := oosConfig(fastLifecycle(100), 1)
	conf.OutOfService.TakeoverWait = 45 * time.Second
	started := time.Now()
	framework.StartNodeShepherd(t, cfg, conf, onlyOutOfService)
	// The new leader has listed and decided about the first node: it
	// tainted it (the defect) or said that it waits.
	framework.Eventually(t, 60*time.Second, "the new leader's first decision", func(ctx context.Context) (bool, string, error) {
		if kube.FindTaint(getNode(t, client, first), outofservice.Taint) != nil {
			return true, "", nil
		}
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: oosEvents(outofservice.EventPending, first)})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items)), nil
	})

	// The previous leader's write lands now.
	ctx := framework.Context(t)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, late, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		taint := outofservice.Taint
		taint.TimeAdded = &now
		n.Spec.Taints = append(n.Spec.Taints, taint)
		n.Annotations[outofservice.AnnotationBootID] = n.Status.NodeInfo.BootID
		n.Annotations[outofservice.AnnotationConfirmedBy] = fmt.Sprintf("person (annotation %s=%q)", outofservice.AnnotationConfirm, "rack power")
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: outofservice.Name})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if landed := time.Since(started); landed > 30*time.Second {
		t.Logf("the previous leader's write landed %v after the new leader started", landed)
	}

	// The new leader refuses the first node for the budget, or (the
	// defect) two nodes are out of service.
	framework.Eventually(t, 2*time.Minute, "the first node refused", func(ctx context.Context) (bool, string, error) {
		if most, _ := high.max(); most > 1 {
			return true, "", nil
		}
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: oosEvents(outofservice.EventBlocked, first)})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items)), nil
	})
	if most, when := high.max(); most > 1 {
		t.Fatalf("%d nodes out of service at once (%v), the budget is 1", most, when)
	}
	if n := getNode(t, client, first); kube.FindTaint(n, outofservice.Taint) != nil {
		t.Errorf("%s tainted beside %s", first, late)
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventBlocked, first), 1); !strings.Contains(msgs[0], "the budget is 1") {
		t.Errorf("%s events: %v", outofservice.EventBlocked, msgs)
	}
}
