package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// benchCluster is 5,000 nodes of 4 CPUs, each with pods of priority 10
// using fill of its CPUs (1 CPU per pod).
func benchCluster(filled int) *cache {
	c := newCache()
	for i := range 5000 {
		name := fmt.Sprintf("node-%d", i)
		c.setNode(node(name, 4000, 110))
		for j := range filled {
			c.setPod(pod(fmt.Sprintf("low-%d-%d", i, j), 10, 1000, onNode(name), started(j)))
		}
	}
	return c
}

// BenchmarkScheduleOne5000Nodes is one scheduling cycle's filtering and
// scoring for a pod that fits on most nodes (3 of 4 CPUs used).
func BenchmarkScheduleOne5000Nodes(b *testing.B) {
	c := benchCluster(3)
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	benchFindNode(b, s, query(pod("p", 100, 500)), nil)
}

// benchFindNode times one cycle's filtering and scoring of q, which must
// fit somewhere; prepare, when set, sets up the cycle's state first.
func benchFindNode(b *testing.B, s *Scheduler, q *podQuery, prepare func(*podQuery)) {
	b.Helper()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.cache.mu.RLock()
		if prepare != nil {
			prepare(q)
		}
		node, _, _ := s.findNode(ctx, q)
		s.cache.mu.RUnlock()
		if node == "" {
			b.Fatal("no node")
		}
	}
}

// BenchmarkPreemption5000Nodes is one preemption evaluation (eligibility,
// 500 candidates sampled, victims, node choice) in a full cluster.
func BenchmarkPreemption5000Nodes(b *testing.B) {
	c := benchCluster(4)
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	p := pod("p", 100, 1000)
	q := query(p)
	ctx := context.Background()
	c.mu.RLock()
	_, statuses, n := s.findNode(ctx, q)
	c.mu.RUnlock()
	if statuses == nil {
		b.Fatal("the pod fits without preemption")
	}
	b.ReportAllocs()
	for b.Loop() {
		c.mu.RLock()
		pr := &preemptor{cfg: preemptionConfig{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100, Parallelism: 16}, c: c, rand: s.rand, now: time.Now()}
		out := pr.preempt(ctx, q, statuses, n)
		c.mu.RUnlock()
		if out.chosen == nil || len(out.chosen.victims) != 1 {
			b.Fatalf("unexpected outcome %+v", out)
		}
	}
}

// BenchmarkFilterFailing5000Nodes is a cycle in which no node fits: every
// node is filtered and its status kept, as before preemption.
func BenchmarkFilterFailing5000Nodes(b *testing.B) {
	c := benchCluster(4)
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	q := query(pod("p", 100, 1000))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.mu.RLock()
		_, st, _ := s.findNode(ctx, q)
		c.mu.RUnlock()
		if len(st) != 5000 {
			b.Fatal("want 5000 statuses")
		}
	}
}

// zonedBenchCluster is 5,000 nodes of 4 CPUs in three zones holding 10,000
// pods of 100m (two per node) made by mk from their index.
func zonedBenchCluster(mk func(i int, node string) *v1.Pod) *cache {
	c := newCache()
	for i := range 5000 {
		name := fmt.Sprintf("node-%d", i)
		n := node(name, 4000, 110)
		n.Labels[v1.LabelTopologyZone] = fmt.Sprintf("zone-%c", 'a'+i%3)
		c.setNode(n)
		for j := range 2 {
			c.setPod(mk(i*2+j, name))
		}
	}
	return c
}

// antiAffinePod is bench-scheduler's anti-affinity workload: groups of 10
// pods, each group required anti-affine on hostname.
func antiAffinePod(i int, node string) *v1.Pod {
	group := fmt.Sprintf("g-%d", i/10)
	return pod(fmt.Sprintf("aa-%d", i), 0, 100, onNode(node), labels2("group", group),
		antiAffinityTo(term(v1.LabelHostname, sel("group", group))))
}

// BenchmarkScheduleOneAntiAffinity5000Nodes is one cycle (state, filter,
// score) of a pod of bench-scheduler's anti-affinity workload among 10,000
// such pods.
func BenchmarkScheduleOneAntiAffinity5000Nodes(b *testing.B) {
	c := zonedBenchCluster(antiAffinePod)
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	benchFindNode(b, s, query(antiAffinePod(5, "")), func(q *podQuery) { q.interPod = newAffinityState(c, q.podInfo, nil) })
}

// spreadPod is bench-scheduler's spread workload: DoNotSchedule on zone,
// ScheduleAnyway on hostname, maxSkew 1.
func spreadPod(i int, node string) *v1.Pod {
	return pod(fmt.Sprintf("ts-%d", i), 0, 100, onNode(node), labels2("app", "web"),
		spreadOn(v1.LabelTopologyZone, 1, v1.DoNotSchedule), spreadOn(v1.LabelHostname, 1, v1.ScheduleAnyway))
}

// BenchmarkScheduleOneSpread5000Nodes is one cycle of a pod of
// bench-scheduler's spread workload among 10,000 such pods.
func BenchmarkScheduleOneSpread5000Nodes(b *testing.B) {
	c := zonedBenchCluster(spreadPod)
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	benchFindNode(b, s, query(spreadPod(0, "")), nil)
}
