package tainteviction

import (
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// apiNode makes GETs of nodes answer what the API server holds now, while
// the informer (fed by LIST and WATCH, which the reactor leaves alone) keeps
// showing the node as it was: a stale cache. set changes the answer.
type apiNode struct {
	mu   sync.Mutex
	node *v1.Node // nil: NotFound
	gets int
}

func (a *apiNode) set(n *v1.Node) { a.mu.Lock(); a.node = n; a.mu.Unlock() }

func (a *apiNode) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.gets }

func (a *apiNode) install(h *harness) {
	h.client.PrependReactor("get", "nodes", func(act clienttesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.gets++
		if a.node == nil {
			return true, nil, apierrors.NewNotFound(v1.Resource("nodes"), act.(clienttesting.GetAction).GetName())
		}
		return true, a.node.DeepCopy(), nil
	})
}

// The informer still shows a NoExecute taint whose toleration ran out, but
// the API server no longer has it (a new leader's cache right after
// takeover, or a node watch that stalls): the deletion is confirmed with a
// read of the node and not made, nor announced. Once the informer catches
// up, the deletion is cancelled.
func TestStaleTaintIsConfirmedBeforeDeleting(t *testing.T) {
	api := &apiNode{node: testNode("n1")}
	h := startWith(t, api.install,
		testNode("n1", noExec("a", at(-20*time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour), tolFor("a", ptr.To[int64](10))))
	h.until("the attempt found no taint and waits to check again", func() bool {
		w, ok := h.c.workers.Get("default/p")
		return ok && w.attempts == 1 && !w.running && api.count() >= 1
	})
	if h.podGone("p") || h.deleteCount() != 0 {
		t.Fatal("the pod was deleted on the informer's stale taint")
	}
	p, _ := h.client.CoreV1().Pods("default").Get(h.ctx, "p", metav1.GetOptions{})
	if len(p.Status.Conditions) != 0 {
		t.Errorf("the pod was marked: %+v", p.Status.Conditions)
	}
	if n := h.eventsLike("Marking for deletion"); n != 0 {
		t.Errorf("%d Marking events, want none", n)
	}
	if n := value(h.c.deletionErrors); n != 0 {
		t.Errorf("%v deletion errors counted, want 0: a stale view is not a failure", n)
	}
	// The informer catches up: the deletion is dropped.
	if _, err := h.client.CoreV1().Nodes().Update(h.ctx, testNode("n1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until("the deletion cancelled", func() bool { _, ok := h.c.workers.Get("default/p"); return !ok })
	h.clk.Step(retryMax)
	if h.podGone("p") || h.deleteCount() != 0 {
		t.Fatal("the pod was deleted after the informer caught up")
	}
}

// The API server has the taint again with a later timeAdded (it came off
// and back while the informer was behind): the deletion moves to the new
// deadline and happens then.
func TestStaleTaintReAddedMovesTheDeletion(t *testing.T) {
	api := &apiNode{node: testNode("n1", noExec("a", at(-2*time.Second)))}
	h := startWith(t, api.install,
		testNode("n1", noExec("a", at(-20*time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour), tolFor("a", ptr.To[int64](10))))
	// timeAdded -2s, rounded up to -1s, plus 10s.
	h.until("rescheduled at the API server's deadline", func() bool {
		w, ok := h.c.workers.Get("default/p")
		return ok && w.due.Equal(base.Add(9*time.Second)) && w.attempts == 0 && !w.running
	})
	h.clk.Step(9*time.Second - time.Millisecond)
	if h.podGone("p") || h.deleteCount() != 0 {
		t.Fatal("the pod was deleted before the re-added taint's toleration ran out")
	}
	h.clk.Step(time.Millisecond)
	h.until("deleted at the new deadline", func() bool { return h.podGone("p") })
	if n := h.eventsLike("Marking for deletion Pod default/p"); n != 1 {
		t.Errorf("%d Marking events, want 1", n)
	}
}

// A node the API server no longer has: its pods still go, as upstream.
func TestNodeGoneFromTheAPIStillEvicts(t *testing.T) {
	api := &apiNode{}
	h := startWith(t, api.install,
		testNode("n1", noExec("a", at(-20*time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour), tolFor("a", ptr.To[int64](10))))
	h.until("deleted", func() bool { return h.podGone("p") })
	if api.count() == 0 {
		t.Error("the node was not read before the deletion")
	}
}

// A dry run confirms as a real one does: nothing reported on a stale taint.
func TestDryRunConfirmsTheTaint(t *testing.T) {
	api := &apiNode{node: testNode("n1")}
	h := startWith(t, func(h *harness) { api.install(h); h.dryRun = true },
		testNode("n1", noExec("a", at(-20*time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour)))
	h.until("the attempt found no taint", func() bool {
		w, ok := h.c.workers.Get("default/p")
		return ok && w.attempts == 1 && !w.running
	})
	if n := h.eventsLike("Marking for deletion"); n != 0 {
		t.Errorf("%d Marking events in a dry run on a stale taint, want none", n)
	}
	// The API server has the taint: the dry run reports it.
	api.set(testNode("n1", noExec("a", at(-20*time.Second))))
	h.clk.Step(retryBackoff(1))
	h.until("announced", func() bool { return h.eventsLike("Marking for deletion Pod default/p") == 1 })
	if h.podGone("p") {
		t.Error("a dry run deleted the pod")
	}
	// The pod judged again on the same taints (the node's sync at the start
	// can come after the report on a busy machine): kept as reported, not
	// reported again, not counted as pending.
	h.until("kept as reported", func() bool { w, ok := h.c.workers.Get("default/p"); return ok && w.done })
	pod, err := h.c.podLister.Pods("default").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	h.c.processPod(h.ctx, pod, h.c.taintsOf("n1"), h.clk.Now())
	h.clk.Step(retryMax)
	if w, ok := h.c.workers.Get("default/p"); !ok || !w.done || w.timer != nil {
		t.Errorf("after judging the pod again: work %+v (present %v), want the reported one, unarmed", w, ok)
	}
	if n := h.c.workers.Len(); n != 0 {
		t.Errorf("%d deletions pending after a dry run's report, want 0", n)
	}
	if n := h.eventsLike("Marking for deletion Pod default/p"); n != 1 {
		t.Errorf("%d Marking events, want 1: reported again on the same taints", n)
	}
	// The taint comes off: the record goes, without a Cancelling event (no
	// deletion was pending).
	h.c.processPod(h.ctx, pod, &nodeTaints{}, h.clk.Now())
	if _, ok := h.c.workers.Get("default/p"); ok {
		t.Error("the reported deletion is kept after the taint came off")
	}
	if n := h.eventsLike("Cancelling deletion"); n != 0 {
		t.Errorf("%d Cancelling events for a dry run's reported deletion, want 0", n)
	}
}

// A leader killed between marking a pod and deleting it: the pod carries
// this controller's DisruptionTarget condition but no deletion. The next
// leader deletes it without a second "Marking for deletion" event (the
// first was sent before the mark). TestLeaderKilledMidEvictionsAndDrains
// once saw two.
func TestPodMarkedByAnEarlierLeaderIsNotAnnouncedAgain(t *testing.T) {
	p := testPod("p", "n1", "u1", base.Add(-time.Hour), tolFor("a", ptr.To[int64](10)))
	p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
		Reason: ReasonDeletionByTaint, Message: MessageDeletionByTaint, LastTransitionTime: metav1.NewTime(base.Add(-time.Second))}}
	h := start(t, testNode("n1", noExec("a", at(-20*time.Second))), p)
	h.until("deleted", func() bool { return h.podGone("p") })
	if n := h.eventsLike("Marking for deletion"); n != 0 {
		t.Errorf("%d Marking events, want none: the earlier leader announced it", n)
	}
}
