package integration

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestTaintEvictionStaleNodeViewEvictsNothing (issue 30, point 7: a chaos
// run saw a new leader mark a pod for taint eviction 28 ms after the node's
// NoExecute taint had come off, its node cache still showing it). Here the
// cache is made stale on purpose: the taint eviction controller talks to the
// API server through a fault proxy, a pod's 10s countdown runs, the
// controller's node watch is held open without events, and the taint is
// removed. When the countdown ends the informer still shows the taint; the
// controller must read the node from the API server before marking the pod,
// and leave it. Once the watch flows again, the deletion is cancelled. If
// the stall and the removal came too late for the countdown on a busy machine,
// the case is undone and set up again with a countdown three times as long.
func TestTaintEvictionStaleNodeViewEvictsNothing(t *testing.T) {
	cp, client := teCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 1, false))
	node := m.NodeNames()[0]
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), controllers.Default(), tainteviction1)
	ctx := framework.Context(t)
	pending := func() float64 { return ns.Metric(t, "nodeshepherd_tainteviction_pods_pending_deletion", nil) }

	const key = "nodeshepherd.io/stale-view"
	// The stall must take hold and the taint go before the countdown ends.
	// On a busy machine they may not within 10 s: then everything is undone
	// and the case is set up again with a countdown three times as long,
	// rather than fail.
	var pod *v1.Pod
	var stall *framework.FaultRule
	var due, removed time.Time
	for attempt, seconds := 0, int64(10); ; attempt, seconds = attempt+1, seconds*3 {
		pod = createTEPod(t, client, fmt.Sprintf("stale-view-%d", attempt), node, nil, []string{holdFinalizer}, teToleration(key, ptr.To(seconds)))
		added := setNoExecuteTaints(t, client, node, teTaint(key))[0].TimeAdded.Time
		due = added.Add(time.Duration(seconds+1) * time.Second) // timeAdded is truncated: +1s
		framework.Eventually(t, 30*time.Second, "the deletion scheduled", func(context.Context) (bool, string, error) {
			return pending() == 1, fmt.Sprintf("%v pending", pending()), nil
		})

		// The node watch stalls: the one open now is cut, its successor held.
		stall = proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("stall-node-watch-%d", attempt), Resource: "nodes", Watch: true, Kind: framework.FaultStall})
		proxy.DropWatches()
		framework.Eventually(t, 60*time.Second, "the controller's node watch held open without events", func(context.Context) (bool, string, error) {
			return proxy.Injected(stall.Name) >= 1, proxy.String(), nil
		})
		// The taint goes while the informer is held. Only a removal that
		// landed before the countdown's end makes the case: after it, the
		// controller rightly deletes the pod.
		setNoExecuteTaints(t, client, node)
		removed = time.Now()
		if removed.Before(due) {
			break
		}
		if seconds >= 270 {
			t.Fatalf("the stall took hold and the taint was removed %v after timeAdded, too late even for a %ds countdown", removed.Sub(added), seconds)
		}
		t.Logf("the stall took hold and the taint was removed %v after timeAdded, too late for a %ds countdown on this machine: again with %ds",
			removed.Sub(added).Round(time.Millisecond), seconds, 3*seconds)
		proxy.Stop(stall)
		proxy.DropWatches()
		// The pod goes too, so that the next attempt's taint has one pod to count down.
		if _, err := client.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "nothing pending after the undo", func(context.Context) (bool, string, error) {
			return pending() == 0, fmt.Sprintf("%v pending", pending()), nil
		})
	}

	// The countdown ends on the stale view. The controller reads the node
	// (a GET through the proxy) at least twice: its first attempt and a
	// check again; the pod must never be marked.
	nodeGets := func() int {
		return proxy.Count(func(e framework.ProxiedRequest) bool {
			return !e.At.Before(removed) && e.Method == http.MethodGet && !e.Watch && e.Resource == "nodes" && e.Name == node
		})
	}
	framework.Eventually(t, 60*time.Second, "the countdown ended and the node was read from the API server", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.DeletionTimestamp != nil || kube.PodCondition(p, v1.DisruptionTarget) != nil {
			return false, "", fmt.Errorf("%s marked for deletion %v after its node's taint was removed (the controller's node cache still showed it): %+v",
				pod.Name, time.Since(removed).Round(time.Millisecond), kube.PodCondition(p, v1.DisruptionTarget))
		}
		return time.Now().After(due) && nodeGets() >= 2, fmt.Sprintf("%d node reads since the removal", nodeGets()), nil
	})
	if marks, _ := evictionMarks(t, client, pod.Name); sum(marks) != 0 {
		t.Errorf("%s announced for deletion %d times on a stale taint", pod.Name, sum(marks))
	}
	if n := ns.Metric(t, "taint_eviction_controller_pod_deletions_total", nil); n != 0 {
		t.Errorf("%v deletions counted, want 0", n)
	}

	// The watch flows again: the informer catches up and the deletion goes.
	proxy.Stop(stall)
	proxy.DropWatches()
	framework.Eventually(t, 60*time.Second, "the deletion dropped once the node watch caught up", func(context.Context) (bool, string, error) {
		return pending() == 0, fmt.Sprintf("%v pending", pending()), nil
	})
	p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.DeletionTimestamp != nil {
		t.Errorf("%s deleted after all", pod.Name)
	}
}
