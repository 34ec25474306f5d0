package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

type harness struct {
	t      *testing.T
	c      *Controller
	client *fake.Clientset
	store  cache.Indexer
	rec    *record.FakeRecorder
}

func newHarness(t *testing.T, cfg Config, nodes ...*v1.Node) *harness {
	t.Helper()
	cfg.AllocateNodeCIDRs = true
	// NewSimpleClientset, not NewClientset: the field-managed tracker builds a
	// type converter costing ~1 s per test binary under -race, and nothing here
	// uses server-side apply.
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	store := factory.Core().V1().Nodes().Informer().GetIndexer()
	rec := record.NewFakeRecorder(100)
	c, err := New(cfg, Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Recorder: rec, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, c: c, client: client, store: store, rec: rec}
	for _, n := range nodes {
		h.add(n)
	}
	return h
}

// add stores a node in the API and in the informer's cache.
func (h *harness) add(n *v1.Node) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.Add(n); err != nil {
		h.t.Fatal(err)
	}
	h.client.ClearActions()
}

// sync runs the handler for a node and, as the informer would, brings the
// cache up to date with what was written.
func (h *harness) sync(name string) error {
	h.t.Helper()
	err := h.c.sync(context.Background(), name)
	for _, a := range h.client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			n, gerr := h.client.CoreV1().Nodes().Get(context.Background(), p.GetName(), metav1.GetOptions{})
			if gerr != nil {
				h.t.Fatal(gerr)
			}
			if uerr := h.store.Update(n); uerr != nil {
				h.t.Fatal(uerr)
			}
		}
	}
	return err
}

// writes lists the writes since the last call.
func (h *harness) writes() []string { return controllertest.TakeWrites(h.client) }

func (h *harness) events() []string { return controllertest.Events(h.rec) }

func (h *harness) podCIDRs(name string) []string {
	h.t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.client.ClearActions()
	return n.Spec.PodCIDRs
}

func ipamNode(name string, cidrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: v1.NodeSpec{PodCIDRs: cidrs}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	return n
}

func TestSyncDecisions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		existing  []*v1.Node // synced first, in order
		node      *v1.Node
		wantCIDRs []string
		wantWrite bool
		wantEvent string // "Type Reason" prefix, or ""
	}{
		{name: "new node gets a block", cfg: Config{ClusterCIDR: "10.244.0.0/16"},
			node: ipamNode("a"), wantCIDRs: []string{"10.244.0.0/24"}, wantWrite: true},
		{name: "dual stack: one block per family", cfg: Config{ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56"},
			node: ipamNode("a"), wantCIDRs: []string{"10.244.0.0/24", "fd00:10:244::/64"}, wantWrite: true},
		{name: "the next node gets the next block", cfg: Config{ClusterCIDR: "10.244.0.0/16"},
			existing: []*v1.Node{ipamNode("a", "10.244.0.0/24")},
			node:     ipamNode("b"), wantCIDRs: []string{"10.244.1.0/24"}, wantWrite: true},
		{name: "a node that has its block is left alone", cfg: Config{ClusterCIDR: "10.244.0.0/16"},
			node: ipamNode("a", "10.244.7.0/24"), wantCIDRs: []string{"10.244.7.0/24"}},
		{name: "podCIDR outside the cluster range: event, no write", cfg: Config{ClusterCIDR: "10.244.0.0/16"},
			node: ipamNode("a", "192.168.0.0/24"), wantCIDRs: []string{"192.168.0.0/24"},
			wantEvent: "Warning " + EventCIDRAssignmentFailed},
		{name: "podCIDR already taken by another node: event, no write", cfg: Config{ClusterCIDR: "10.244.0.0/16"},
			existing: []*v1.Node{ipamNode("a", "10.244.3.0/24")},
			node:     ipamNode("b", "10.244.3.0/24"), wantCIDRs: []string{"10.244.3.0/24"},
			wantEvent: "Warning " + EventCIDRAssignmentFailed},
		{name: "range full: CIDRNotAvailable, no write", cfg: Config{ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 25},
			existing: []*v1.Node{ipamNode("a", "10.0.0.0/25"), ipamNode("b", "10.0.0.128/25")},
			node:     ipamNode("c"), wantEvent: "Warning " + EventCIDRNotAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			for _, n := range tc.existing {
				h.add(n)
				if err := h.sync(n.Name); err != nil {
					t.Fatal(err)
				}
			}
			h.events()
			h.writes()
			h.add(tc.node)
			if err := h.sync(tc.node.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if got := h.writes(); (len(got) > 0) != tc.wantWrite || len(got) > 1 {
				t.Errorf("writes = %v, want a write: %v", got, tc.wantWrite)
			}
			if got := h.podCIDRs(tc.node.Name); !slices.Equal(got, tc.wantCIDRs) {
				t.Errorf("podCIDRs = %v, want %v", got, tc.wantCIDRs)
			}
			ev := h.events()
			switch {
			case tc.wantEvent == "" && len(ev) > 0:
				t.Errorf("unexpected events %q", ev)
			case tc.wantEvent != "" && (len(ev) != 1 || !strings.HasPrefix(ev[0], tc.wantEvent+" ")):
				t.Errorf("events = %q, want one %s", ev, tc.wantEvent)
			}
			// Said once: a resync does not repeat the event nor write.
			if err := h.sync(tc.node.Name); err != nil {
				t.Fatal(err)
			}
			if ev, w := h.events(), h.writes(); len(ev) > 0 || len(w) > 0 {
				t.Errorf("second sync: events %q, writes %v", ev, w)
			}
		})
	}
}

// A deleted node's block goes back to the pool and a node waiting on a full
// range gets it.
func TestSyncReleaseWakesWaitingNode(t *testing.T) {
	h := newHarness(t, Config{ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 25},
		ipamNode("a", "10.0.0.0/25"), ipamNode("b", "10.0.0.128/25"), ipamNode("c"))
	for _, n := range []string{"a", "b", "c"} {
		if err := h.sync(n); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.podCIDRs("c"); len(got) != 0 {
		t.Fatalf("c got %v from a full range", got)
	}
	if err := h.store.Delete(ipamNode("b")); err != nil {
		t.Fatal(err)
	}
	if err := h.sync("b"); err != nil {
		t.Fatal(err)
	}
	if h.c.queue.Len() != 1 {
		t.Fatalf("queue has %d keys after the release, want c", h.c.queue.Len())
	}
	key, _ := h.c.queue.Get()
	h.c.queue.Done(key)
	if key != "c" {
		t.Fatalf("woke %q, want c", key)
	}
	if err := h.sync("c"); err != nil {
		t.Fatal(err)
	}
	if got := h.podCIDRs("c"); !slices.Equal(got, []string{"10.0.0.128/25"}) {
		t.Errorf("c got %v, want b's freed block", got)
	}
}

// A write the API server refused gives the block back, says
// CIDRAssignmentFailed and returns the error so the key is retried.
func TestSyncWriteFailure(t *testing.T) {
	h := newHarness(t, Config{ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 25}, ipamNode("a"))
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "a", errors.New("injected refusal"))
	})
	if err := h.sync("a"); err == nil {
		t.Fatal("sync succeeded despite the failed write")
	}
	if ev := h.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventCIDRAssignmentFailed+" ") {
		t.Errorf("events = %q", ev)
	}
	// The block was released: both blocks are still free.
	for range 2 {
		if _, err := h.c.alloc.Allocate(); err != nil {
			t.Fatalf("block not released: %v", err)
		}
	}
}

func TestSyncDryRunWritesNothing(t *testing.T) {
	h := newHarness(t, Config{ClusterCIDR: "10.0.0.0/24", DryRun: true}, ipamNode("a"))
	if err := h.sync("a"); err != nil {
		t.Fatal(err)
	}
	if w := h.writes(); len(w) > 0 {
		t.Errorf("dry-run wrote %v", w)
	}
}

// A podCIDRs write that lands but whose answer is lost (the client's
// deadline) keeps its CIDRs reserved for the node: the next node gets
// another block, and the retry sends the same CIDRs again. A rejected write
// frees them.
func TestSyncUnansweredWriteKeepsItsCIDRs(t *testing.T) {
	h := newHarness(t, Config{ClusterCIDR: "10.244.0.0/16"}, ipamNode("a"), ipamNode("b"))
	lose := true
	h.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if !lose || a.GetSubresource() != "" {
			return false, nil, nil
		}
		lose = false
		// Apply it, then answer as a client whose deadline passed.
		p := a.(clienttesting.PatchAction)
		var body struct {
			Spec v1.NodeSpec `json:"spec"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		obj, err := h.client.Tracker().Get(a.GetResource(), "", p.GetName())
		if err != nil {
			t.Fatal(err)
		}
		n := obj.(*v1.Node).DeepCopy()
		n.Spec.PodCIDR, n.Spec.PodCIDRs = body.Spec.PodCIDR, body.Spec.PodCIDRs
		if err := h.client.Tracker().Update(a.GetResource(), n, ""); err != nil {
			t.Fatal(err)
		}
		return true, nil, context.DeadlineExceeded
	})
	if err := h.c.sync(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("sync of a after a lost answer: %v, want an error saying the write got no answer", err)
	}
	h.client.ClearActions()
	// The informer has not seen a's CIDRs yet: b must still not get them.
	if err := h.sync("b"); err != nil {
		t.Fatal(err)
	}
	if got := h.podCIDRs("b"); !slices.Equal(got, []string{"10.244.1.0/24"}) {
		t.Fatalf("b got %v, want 10.244.1.0/24 (10.244.0.0/24 may be a's)", got)
	}
	// The retry sends a's CIDRs again, and the informer's copy settles it.
	if err := h.sync("a"); err != nil {
		t.Fatal(err)
	}
	if got := h.podCIDRs("a"); !slices.Equal(got, []string{"10.244.0.0/24"}) {
		t.Fatalf("a has %v, want 10.244.0.0/24", got)
	}
	if err := h.sync("a"); err != nil {
		t.Fatal(err)
	}
	h.c.ownedMu.Lock()
	defer h.c.ownedMu.Unlock()
	if len(h.c.unconfirmed) != 0 || !slices.Equal(h.c.owned["a"], []string{"10.244.0.0/24"}) {
		t.Errorf("after the retry: unconfirmed %v, a owns %v", h.c.unconfirmed, h.c.owned["a"])
	}
}

// answered tells the API server's refusals (the write did not happen) from
// errors after which it may have (no answer, or the server's own timeout).
func TestAnswered(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, false},
		{errors.New("connection reset by peer"), false},
		{apierrors.NewTimeoutError("timeout", 1), false},
		{apierrors.NewServerTimeout(gr, "patch", 1), false},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewNotFound(gr, "a"), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "a", nil), true},
		{apierrors.NewForbidden(gr, "a", errors.New("rbac")), true},
	} {
		if got := answered(tc.err); got != tc.want {
			t.Errorf("answered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
