package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// run runs preemption for p over c as the scheduling cycle would.
func run(t *testing.T, pr *preemptor, p *v1.Pod) preemptOutcome {
	t.Helper()
	st := statusesOf(pr.c, p)
	for _, s := range st {
		if s.ok() {
			t.Fatalf("pod %s fits without preemption", p.Name)
		}
	}
	return pr.preempt(context.Background(), query(p), st, len(pr.c.list))
}

func TestPostFilterMessages(t *testing.T) {
	tests := []struct {
		name  string
		nodes []*v1.Node
		pods  []*v1.Pod
		p     *v1.Pod
		want  string
	}{
		{"tied priority is never a victim", nodes(1, 1000, 1), []*v1.Pod{pod("low", 10, 100, onNode("node1"))}, pod("p", 10, 100),
			"0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		{"unresolvable node is not a candidate", []*v1.Node{func() *v1.Node { n := node("node1", 1000, 1); n.Spec.Unschedulable = true; return n }()},
			[]*v1.Pod{pod("low", 1, 100, onNode("node1"))}, pod("p", 10, 100), "0/1 nodes are available: 1 Preemption is not helpful for scheduling."},
		{"not enough cpu after removing low priority pods", nodes(2, 1000, 10),
			[]*v1.Pod{pod("a", 1, 500, onNode("node1")), pod("b", 1, 500, onNode("node2"))}, pod("p", 10, 1200),
			"0/2 nodes are available: 2 Preemption is not helpful for scheduling."},
		{"mixed reasons", nodes(3, 1000, 10), []*v1.Pod{pod("a", 20, 900, onNode("node1")), pod("b", 20, 900, onNode("node2")),
			pod("c1", 1, 300, onNode("node3")), pod("c2", 20, 600, onNode("node3"))}, pod("p", 10, 500),
			"0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, newTestPreemptor(world(tc.nodes, tc.pods...)), tc.p)
			if out.chosen != nil || out.msg != tc.want {
				t.Errorf("got %q (chosen %v), want %q", out.msg, out.chosen, tc.want)
			}
			if out.nominate == nil || *out.nominate != "" {
				t.Errorf("no candidates must clear the nomination, got %v", out.nominate)
			}
		})
	}
}

// The case above with 1200m on 1000m nodes is unresolvable (bigger than the
// node); this one is resolvable but still does not fit.
func TestNoCandidateInsufficientAfterRemoval(t *testing.T) {
	c := world(nodes(2, 1000, 10), pod("hi1", 20, 600, onNode("node1")), pod("lo1", 1, 300, onNode("node1")),
		pod("hi2", 20, 600, onNode("node2")), pod("lo2", 1, 300, onNode("node2")))
	out := run(t, newTestPreemptor(c), pod("p", 10, 500))
	if want := "0/2 nodes are available: 2 Insufficient cpu."; out.msg != want {
		t.Errorf("got %q, want %q", out.msg, want)
	}
}

func TestVictimSelection(t *testing.T) {
	tests := []struct {
		name string
		pods []*v1.Pod
		p    *v1.Pod
		want []string
	}{
		{"reprieve keeps the small low-priority pod", []*v1.Pod{pod("big", 5, 600, onNode("node1")), pod("small", 1, 200, onNode("node1"))},
			pod("p", 10, 500), []string{"big"}},
		{"medium is preempted, small lower one stays", []*v1.Pod{pod("p1.1", 1, 100, onNode("node1")), pod("p1.2", 5, 800, onNode("node1"))},
			pod("p", 10, 700), []string{"p1.2"}},
		{"mixed priorities preempted in importance order", []*v1.Pod{pod("p1.1", 1, 300, onNode("node1")), pod("p1.2", 3, 300, onNode("node1")),
			pod("p1.3", 2, 300, onNode("node1")), pod("keep", 100, 100, onNode("node1"))}, pod("p", 10, 800), []string{"p1.2", "p1.3", "p1.1"}},
		{"equal priority: the later-started pod goes first", []*v1.Pod{pod("p1.1", 1, 400, onNode("node1"), started(10)),
			pod("p1.2", 1, 400, onNode("node1"), started(1)), pod("keep", 100, 100, onNode("node1"))}, pod("p", 10, 500), []string{"p1.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, newTestPreemptor(world(nodes(1, 1000, 10), tc.pods...)), tc.p)
			if out.chosen == nil {
				t.Fatalf("no candidate: %s", out.msg)
			}
			if got := names(out.chosen.victims); !slices.Equal(got, tc.want) {
				t.Errorf("victims %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPDBAccounting(t *testing.T) {
	t.Run("budget is spent cumulatively in importance order", func(t *testing.T) {
		c := world(nodes(1, 1000, 10), pod("a", 2, 500, onNode("node1"), labelled("app", "x")), pod("b", 1, 500, onNode("node1"), labelled("app", "x")))
		out := run(t, newTestPreemptor(c, pdb("x", 1, "x")), pod("p", 10, 1000))
		if out.chosen == nil || out.chosen.pdbViolations != 1 || len(out.chosen.victims) != 2 {
			t.Fatalf("got %+v, want 2 victims and 1 violation", out.chosen)
		}
	})
	t.Run("pods in disruptedPods do not spend the budget", func(t *testing.T) {
		c := world(nodes(1, 1000, 10), pod("a", 1, 1000, onNode("node1"), labelled("app", "x")))
		out := run(t, newTestPreemptor(c, pdb("x", 0, "x", "a")), pod("p", 10, 1000))
		if out.chosen == nil || out.chosen.pdbViolations != 0 {
			t.Fatalf("got %+v, want 0 violations", out.chosen)
		}
	})
	t.Run("pods without labels never violate", func(t *testing.T) {
		c := world(nodes(1, 1000, 10), pod("a", 1, 1000, onNode("node1")))
		emptyish := pdb("x", 0, "x")
		out := run(t, newTestPreemptor(c, emptyish), pod("p", 10, 1000))
		if out.chosen == nil || out.chosen.pdbViolations != 0 {
			t.Fatalf("got %+v", out.chosen)
		}
	})
	t.Run("violating pods are reprieved first", func(t *testing.T) {
		// Either pod alone makes room; the protected one is kept.
		c := world(nodes(1, 1000, 10), pod("protected", 1, 500, onNode("node1"), labelled("app", "x"), started(0)),
			pod("free", 1, 500, onNode("node1"), started(5)))
		out := run(t, newTestPreemptor(c, pdb("x", 0, "x")), pod("p", 10, 500))
		if out.chosen == nil || !slices.Equal(names(out.chosen.victims), []string{"free"}) || out.chosen.pdbViolations != 0 {
			t.Fatalf("got %+v", out.chosen)
		}
	})
}

func TestNodeChoice(t *testing.T) {
	cand := func(node string, violations int, victims ...*v1.Pod) *candidate {
		c := &candidate{node: node, pdbViolations: violations}
		for _, v := range victims {
			c.victims = append(c.victims, newPodInfo(v))
		}
		slices.SortStableFunc(c.victims, byImportanceAt(time.Now()))
		return c
	}
	tests := []struct {
		name  string
		cands []*candidate
		want  string
	}{
		{"fewest PDB violations", []*candidate{cand("node1", 1, pod("a", 1, 0)), cand("node2", 0, pod("b", 50, 0))}, "node2"},
		{"lowest highest-victim priority", []*candidate{cand("node1", 0, pod("a", 20, 0)), cand("node2", 0, pod("b", 10, 0), pod("c", 10, 0)),
			cand("node3", 0, pod("d", 30, 0))}, "node2"},
		{"lowest priority sum", []*candidate{cand("node1", 0, pod("a", 10, 0), pod("b", 5, 0)), cand("node2", 0, pod("c", 10, 0), pod("d", 1, 0))}, "node2"},
		{"shifted sum: negative priorities still count, more victims is worse", []*candidate{cand("node1", 0, pod("a", -10, 0), pod("b", -10, 0)),
			cand("node2", 0, pod("c", -10, 0))}, "node2"},
		{"fewest victims when highest and sum tie", []*candidate{cand("node1", 0, pod("a", 0, 0), pod("b", 0, 0)), cand("node2", 0, pod("c", 0, 0), pod("d", 0, 0))}, ""},
		{"latest start of the highest-priority victims", []*candidate{cand("node1", 0, pod("a", 5, 0, started(1))), cand("node2", 0, pod("b", 5, 0, started(9))),
			cand("node3", 0, pod("c", 5, 0, started(4)))}, "node2"},
		{"start time only of the highest-priority victims", []*candidate{cand("node1", 0, pod("a", 5, 0, started(1)), pod("x", 1, 0, started(30))),
			cand("node2", 0, pod("b", 5, 0, started(9)), pod("y", 1, 0, started(0)))}, "node2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := newTestPreemptor(newCache()).pick(tc.cands)
			if tc.want != "" && got.node != tc.want {
				t.Errorf("picked %s, want %s", got.node, tc.want)
			}
		})
	}
}

func TestEligibility(t *testing.T) {
	terminatingVictim := func(p *v1.Pod) {
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
	}
	terminatingOther := func(p *v1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
	tests := []struct {
		name      string
		victim    podOpt
		nominated bool
		p         *v1.Pod
		unresolv  bool
		want      bool
	}{
		{"without nominated node", terminatingVictim, false, pod("p", 10, 500), false, true},
		{"preemptionPolicy Never", nil, false, pod("p", 10, 500, never()), false, false},
		{"victim terminating on the nominated node", terminatingVictim, true, pod("p", 10, 500), false, false},
		{"non-victim pods terminating", terminatingOther, true, pod("p", 10, 500), false, true},
		{"stale nomination (node now unresolvable)", terminatingVictim, true, pod("p", 10, 500), true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := []podOpt{onNode("node1")}
			if tc.victim != nil {
				opts = append(opts, tc.victim)
			}
			c := world(nodes(1, 1000, 10), pod("v", 1, 1000, opts...))
			if tc.nominated {
				c.nominate(newPodInfo(tc.p), "node1")
			}
			st := map[string]status{"node1": reject(unschedulable, "Insufficient cpu")}
			if tc.unresolv {
				st["node1"] = reject(unresolvable, reasonTaint)
			}
			got, _ := newTestPreemptor(c).eligible(newPodInfo(tc.p), st)
			if got != tc.want {
				t.Errorf("eligible = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a victim chosen by another preemption in flight counts as terminating", func(t *testing.T) {
		c := world(nodes(1, 1000, 10), pod("v", 1, 1000, onNode("node1")))
		p := pod("p", 10, 500)
		c.nominate(newPodInfo(p), "node1")
		c.doomed["v"] = true
		c.setPod(pod("v", 1, 1000, onNode("node1"))) // a status update of the victim does not forget it
		if ok, msg := newTestPreemptor(c).eligible(newPodInfo(p), map[string]status{"node1": reject(unschedulable, "Insufficient cpu")}); ok || msg != msgTerminating {
			t.Errorf("eligible=%v %q; want to wait for the victim", ok, msg)
		}
	})
	t.Run("a node rejected for devices is not a stale nomination", func(t *testing.T) {
		// Its victim still terminating, the devices it frees are still
		// taken: trying elsewhere now would preempt twice.
		c := world(nodes(1, 1000, 10), pod("v", 1, 1000, onNode("node1"), terminatingVictim))
		p := pod("p", 10, 500)
		c.nominate(newPodInfo(p), "node1")
		if ok, msg := newTestPreemptor(c).eligible(newPodInfo(p), map[string]status{"node1": lacksDevices(reasonCannotAllocate)}); ok || msg != msgTerminating {
			t.Errorf("eligible=%v %q; want to wait for the victim", ok, msg)
		}
	})
	t.Run("not eligible keeps the nomination", func(t *testing.T) {
		c := world(nodes(1, 1000, 10), pod("v", 1, 1000, onNode("node1")))
		out := run(t, newTestPreemptor(c), pod("p", 10, 500, never()))
		if out.nominate != nil || out.msg != msgPolicyNever {
			t.Errorf("got %+v", out)
		}
	})
}

func TestCandidateSampling(t *testing.T) {
	pr := newTestPreemptor(newCache())
	for _, tc := range []struct{ n, pct, abs, want int }{{5000, 10, 100, 500}, {1000, 10, 100, 100}, {500, 10, 100, 100}, {50, 10, 100, 50}, {5, 40, 1, 2}} {
		pr.cfg.MinCandidateNodesPercentage, pr.cfg.MinCandidateNodesAbsolute = int32(tc.pct), int32(tc.abs)
		if got := pr.numCandidates(tc.n); got != tc.want {
			t.Errorf("numCandidates(%d, %d%%, %d) = %d, want %d", tc.n, tc.pct, tc.abs, got, tc.want)
		}
	}

	mk := func(protect map[int]bool) *cache {
		var pods []*v1.Pod
		for i := 1; i <= 5; i++ {
			n := "node" + string(rune('0'+i))
			opts := []podOpt{onNode(n)}
			if protect[i] {
				opts = append(opts, labelled("app", "x"))
			}
			pods = append(pods, pod("v"+n, 1, 1000, opts...))
		}
		return world(nodes(5, 1000, 10), pods...)
	}
	t.Run("stops after numCandidates", func(t *testing.T) {
		pr := newTestPreemptor(mk(nil))
		pr.cfg = preemptionConfig{MinCandidateNodesPercentage: 40, MinCandidateNodesAbsolute: 1, Parallelism: 1}
		q := query(pod("p", 10, 1000))
		cands, _ := pr.dryRun(context.Background(), q, nil, []string{"node1", "node2", "node3", "node4", "node5"}, 4, 2)
		got := []string{}
		for _, c := range cands {
			got = append(got, c.node)
		}
		if !slices.Equal(got, []string{"node5", "node1"}) {
			t.Errorf("candidates %v, want [node5 node1] (offset 4, wrapping)", got)
		}
	})
	t.Run("looks past numCandidates until a node violates no PDB", func(t *testing.T) {
		pr := newTestPreemptor(mk(map[int]bool{1: true, 2: true, 4: true}), pdb("x", 0, "x"))
		pr.cfg = preemptionConfig{MinCandidateNodesPercentage: 40, MinCandidateNodesAbsolute: 1, Parallelism: 1}
		q := query(pod("p", 10, 1000))
		cands, _ := pr.dryRun(context.Background(), q, nil, []string{"node1", "node2", "node3", "node4", "node5"}, 0, 2)
		got := []string{}
		for _, c := range cands {
			got = append(got, c.node)
		}
		// node1, node2 violate; node3 is the first that does not.
		if !slices.Equal(got, []string{"node3", "node1", "node2"}) {
			t.Errorf("candidates %v, want [node3 node1 node2]", got)
		}
		if best := pr.pick(cands); best.node != "node3" {
			t.Errorf("picked %s, want node3", best.node)
		}
	})
}

func TestNominatedCapacityReserved(t *testing.T) {
	c := world(nodes(1, 1000, 10))
	high := pod("high", 100, 800)
	c.nominate(newPodInfo(high), "node1")
	if st := statusesOf(c, pod("low", 10, 500))["node1"]; st.ok() {
		t.Error("a lower-priority pod took the room reserved for a nominated pod")
	}
	if st := statusesOf(c, pod("equal", 100, 500))["node1"]; st.ok() {
		t.Error("an equal-priority pod took the room reserved for a nominated pod")
	}
	if st := statusesOf(c, pod("higher", 200, 500))["node1"]; !st.ok() {
		t.Errorf("a higher-priority pod must ignore the reservation: %v", st)
	}
}
