package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"
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
