package nodelifecycle

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// A write whose answer is lost (kube.WriteTimeout ran out) may have landed:
// the controller neither sends it again blindly nor takes it as failed. The
// fake API server here applies the write and then answers with the client's
// deadline, as a proxy holding the answer back would; the informer does not
// see the write (cl.nodeSt is filled by hand), so the controller's view is
// stale exactly as after a real lost answer.

// loseAnswers makes the next n writes matching (verb, resource,
// subresource, and keep) land and then fail with context.DeadlineExceeded.
func (cl *cluster) loseAnswers(verb, resource, sub string, n int, keep func(k8stesting.Action) bool) *int {
	lostCount := 0
	cl.client.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lostCount >= n || a.GetSubresource() != sub || (keep != nil && !keep(a)) {
			return false, nil, nil
		}
		lostCount++
		if _, _, err := k8stesting.ObjectReaction(cl.client.Tracker())(a); err != nil {
			cl.t.Fatalf("applying the write whose answer is lost: %v", err)
		}
		return true, nil, context.DeadlineExceeded
	})
	return &lostCount
}

// carries says whether a node patch of name sets taint.
func carries(a k8stesting.Action, name string, taint v1.Taint) bool {
	p, ok := a.(k8stesting.PatchAction)
	if !ok || a.GetResource().Resource != "nodes" || p.GetName() != name {
		return false
	}
	var patch struct {
		Spec struct{ Taints []v1.Taint } `json:"spec"`
	}
	if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
		return false
	}
	for _, t := range patch.Spec.Taints {
		if t.MatchTaint(&taint) {
			return true
		}
	}
	return false
}

// runRetrying is run for a pass whose status writes fail: a failed health
// update is retried after retrySleepTime on the controller's clock, which
// this moves on (in retrySleepTime steps) while run waits for it.
func (cl *cluster) runRetrying(d time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.run(d)
	}()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
			cl.clk.Step(retrySleepTime)
		}
	}
}

// taintPatches counts the node patches that carried taint.
func (cl *cluster) taintPatches(name string, taint v1.Taint) int {
	n := 0
	for _, a := range cl.client.Actions() {
		if carries(a, name, taint) {
			n++
		}
	}
	return n
}

// TestLostTaintAnswerIsRecheckedNotRepeated: the unreachable taint's PATCH
// lands but its answer is lost. The zone queue does not give up on the node;
// its next attempt reads the node from the API server, finds the taint, and
// neither writes it again (its timeAdded stays the first one) nor counts the
// eviction twice.
func TestLostTaintAnswerIsRecheckedNotRepeated(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4})
	cl.run(5 * time.Second)
	silent := cl.inZone("a")[0]
	// (Reactors run under the fake's lock: they must not call Actions.)
	lostN := cl.loseAnswers("patch", "nodes", "", 1, func(a k8stesting.Action) bool {
		return carries(a, silent, UnreachableTaint)
	})
	cl.silence([]string{silent}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)

	if *lostN != 1 {
		t.Fatalf("%d taint writes lost their answer, want 1", *lostN)
	}
	api, err := cl.client.CoreV1().Nodes().Get(context.Background(), silent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taint := kube.FindTaint(api, UnreachableTaint)
	if taint == nil {
		t.Fatalf("taints %v lack the unreachable NoExecute taint", api.Spec.Taints)
	}
	if got := cl.taintPatches(silent, UnreachableTaint); got != 1 {
		t.Errorf("%d patches carried the unreachable taint, want 1 (the one whose answer was lost)", got)
	}
	if got := cl.counter("node_collector_evictions_total", ""); got != 1 {
		t.Errorf("evictions counted %v, want 1", got)
	}
	// The controller's own view has it too, with the API server's timeAdded.
	view, _ := cl.c.latestNode(silent)
	if vt := kube.FindTaint(view, UnreachableTaint); vt == nil || !vt.TimeAdded.Equal(taint.TimeAdded) {
		t.Errorf("the controller's view has taint %v, want %v", vt, taint)
	}
	if _, unsure := peekLost(&cl.c.lost.mu, &cl.c.lost.taints, silent); unsure {
		t.Error("the lost write is still unconfirmed after the re-read")
	}
}

// TestLostUnknownAnswerKeepsTheEdge: the Ready=Unknown status update lands
// but its answer is lost. The retry's fresh read finds Unknown; the node's
// Ready→Unknown edge is not lost with the answer: its pods are queued for
// marking, and the write is not sent again.
func TestLostUnknownAnswerKeepsTheEdge(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4})
	cl.run(5 * time.Second)
	silent := cl.inZone("a")[1]
	lostN := cl.loseAnswers("update", "nodes", "status", 1, func(a k8stesting.Action) bool {
		return a.(k8stesting.UpdateAction).GetObject().(*v1.Node).Name == silent
	})
	cl.silence([]string{silent}, 0)
	cl.runRetrying(cfg.NodeMonitorGracePeriod + 10*time.Second)

	if *lostN != 1 {
		t.Fatalf("%d status writes lost their answer, want 1", *lostN)
	}
	if !cl.marked[silent] {
		t.Error("the pods of the node marked Unknown (answer lost) were never queued for marking")
	}
	updates := 0
	for _, a := range cl.client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" && a.(k8stesting.UpdateAction).GetObject().(*v1.Node).Name == silent {
			updates++
		}
	}
	if updates != 1 {
		t.Errorf("%d status updates of %s, want 1", updates, silent)
	}
	if _, ok := cl.tainted[silent]; !ok {
		t.Error("the node was never tainted")
	}
}

// TestLostMarkAnswerIsRecheckedNotRepeated: a pod's NotReady mark lands but
// its answer is lost. The retry reads the pod, finds the mark it sent, and
// counts it once, without a second patch; a mark that did not land is sent
// again.
func TestLostMarkAnswerIsRecheckedNotRepeated(t *testing.T) {
	cfg := DefaultConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 1})
	c := cl.c
	for _, name := range []string{"landed", "unsent"} {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec:   v1.PodSpec{NodeName: cl.nodes[0]},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
		if _, err := c.client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cl.loseAnswers("patch", "pods", "status", 1, func(a k8stesting.Action) bool {
		return a.(k8stesting.PatchAction).GetName() == "landed"
	})
	// "unsent": the request never reached the server.
	unsent := 0
	cl.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() != "unsent" || unsent > 0 {
			return false, nil, nil
		}
		unsent++
		return true, nil, context.DeadlineExceeded
	})
	ctx := context.Background()
	stale := map[string]*v1.Pod{}
	for _, name := range []string{"landed", "unsent"} {
		p, _ := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		stale[name] = p // the informer's copy, from before the writes
		if err := c.markPodNotReady(ctx, p); err == nil {
			t.Fatalf("%s: a mark without an answer reported success", name)
		}
	}
	if got := counterValue(t, c.metrics.podsMarkedNotReady); got != 0 {
		t.Fatalf("marks counted before any answer: %v", got)
	}
	cl.clk.Step(time.Second)
	for _, name := range []string{"landed", "unsent"} {
		if err := c.markPodNotReady(ctx, stale[name]); err != nil {
			t.Fatalf("%s: retry: %v", name, err)
		}
	}
	patches := map[string]int{}
	for _, a := range cl.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" {
			patches[p.GetName()]++
		}
	}
	if patches["landed"] != 1 || patches["unsent"] != 2 {
		t.Errorf("status patches %v, want landed 1 (re-checked, not sent again), unsent 2 (sent again)", patches)
	}
	if got := counterValue(t, c.metrics.podsMarkedNotReady); got != 2 {
		t.Errorf("marks counted %v, want 2 (each pod once)", got)
	}
	for _, name := range []string{"landed", "unsent"} {
		p, _ := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if r := kube.PodCondition(p, v1.PodReady); r == nil || r.Status != v1.ConditionFalse {
			t.Errorf("%s: Ready %+v, want False", name, r)
		}
	}
}
