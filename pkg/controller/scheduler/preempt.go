package scheduler

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// Messages of upstream's DefaultPreemption, prefixed "preemption: " in the
// pod's status as kube-scheduler does.
const (
	msgPolicyNever  = "not eligible due to preemptionPolicy=Never."
	msgTerminating  = "not eligible due to a terminating pod on the nominated node."
	msgNoCandidate  = "no candidate node for preemption"
	preemptionTag   = "preemption: "
	preemptedReason = "Preempted"
)

// preemptionConfig is DefaultPreemptionArgs.
type preemptionConfig struct {
	MinCandidateNodesPercentage int32
	MinCandidateNodesAbsolute   int32
	Parallelism                 int
}

// candidate is a node where removing victims lets the preemptor fit.
type candidate struct {
	node string
	// victims in importance order: victims[0] has the highest priority.
	victims       []*podInfo
	pdbViolations int
	// freedClaims are the allocated claims reserved only by the victims
	// (set on the chosen candidate): the preemptor waits for their
	// deallocation.
	freedClaims []*resourceapi.ResourceClaim
}

// preemptOutcome is what preemption decided. nominate is nil when the
// preemptor's nomination stays as it is.
type preemptOutcome struct {
	nominate *string
	msg      string // without the "preemption: " prefix; empty on success
	chosen   *candidate
}

// preemptor evaluates preemption against the cache. Callers hold c.mu for
// reading.
type preemptor struct {
	cfg  preemptionConfig
	c    *cache
	pdbs []*policyv1.PodDisruptionBudget
	rand *rand.Rand
	// now stands in for the start of pods not started yet (from the
	// scheduler's clock, once per preemption so that the order is stable).
	now time.Time
	// filterCalls counts fit checks, for tests of early cancellation.
	filterCalls atomic.Int64
}

// terminatingByPreemption is a pod being deleted with the condition the
// scheduler sets on victims.
func terminatingByPreemption(p *v1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget {
			return c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
		}
	}
	return false
}

// eligible is PodEligibleToPreemptOthers.
func (p *preemptor) eligible(pi *podInfo, statuses map[string]status) (bool, string) {
	pod := pi.pod
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return false, msgPolicyNever
	}
	nom := p.c.nominatedTo[pod.UID]
	if nom == "" {
		return true, ""
	}
	if s, ok := statuses[nom]; ok && s.code == unresolvable && !s.devices {
		return true, "" // the nomination is stale
	}
	if n := p.c.nodes[nom]; n != nil {
		for _, q := range n.pods {
			// Victims of a preemption in flight count as terminating even
			// before the informer shows it: retrying elsewhere now would
			// preempt a second time.
			if q.priority < pi.priority && (terminatingByPreemption(q.pod) || p.c.doomed[q.pod.UID]) {
				return false, msgTerminating
			}
		}
	}
	return true, ""
}

// numCandidates is max(n × percentage / 100, absolute), capped at n.
func (p *preemptor) numCandidates(n int) int {
	k := n * int(p.cfg.MinCandidateNodesPercentage) / 100
	k = max(k, int(p.cfg.MinCandidateNodesAbsolute))
	return min(k, n)
}

// preempt runs DefaultPreemption's PostFilter for a pod that no node fits.
// statuses are the filter results of every node.
func (p *preemptor) preempt(ctx context.Context, q *podQuery, statuses map[string]status, numNodes int) preemptOutcome {
	if ok, msg := p.eligible(q.podInfo, statuses); !ok {
		return preemptOutcome{msg: msg}
	}
	if dra := q.dra.forPreemption(p.c.nodes); dra != nil {
		// Victims free the devices of the claims only they reserve:
		// DynamicResources' filter in the dry run allocates without them.
		pq := *q
		pq.dra = dra
		q = &pq
	}
	var potential []string
	for name, s := range statuses {
		if s.code == unschedulable || (s.devices && q.dra.mayFree(p.c.nodes[name], q.priority)) {
			potential = append(potential, name)
		}
	}
	if len(potential) == 0 {
		return preemptOutcome{nominate: ptr.To(""), msg: fitError(numNodes, nil, reasonNotHelpful)}
	}
	// Map order is random; sort so that the random offset is the only
	// source of spread (and tests can fix it).
	slices.Sort(potential)
	offset := p.rand.Intn(len(potential))
	cands, dry := p.dryRun(ctx, q, statuses, potential, offset, p.numCandidates(len(potential)))
	if len(cands) == 0 {
		return preemptOutcome{nominate: ptr.To(""), msg: fitError(numNodes, dry, reasonNotHelpful)}
	}
	best := p.pick(cands)
	if best == nil {
		return preemptOutcome{msg: msgNoCandidate}
	}
	best.freedClaims = q.dra.freedClaims(best.victims)
	return preemptOutcome{nominate: ptr.To(best.node), chosen: best}
}

// dryRun selects victims on potential nodes in parallel from offset,
// stopping once numCandidates are found and at least one violates no PDB.
// It returns the candidates (non-violating first) and the statuses of nodes
// that are not candidates; a node the cycle rejected for want of devices
// where no victims help is left out of those (kube-scheduler, which never
// tries such a node, counts it as not helpful).
func (p *preemptor) dryRun(ctx context.Context, q *podQuery, cycle map[string]status, potential []string, offset, numCandidates int) ([]*candidate, map[string]status) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu                    sync.Mutex
		nonViolating, violate []*candidate
		statuses              = map[string]status{}
		next                  atomic.Int64
	)
	work := func() {
		for ctx.Err() == nil {
			i := int(next.Add(1)) - 1
			if i >= len(potential) {
				return
			}
			name := potential[(offset+i)%len(potential)]
			victims, violations, st := p.selectVictims(q, p.c.nodes[name].clone())
			mu.Lock()
			switch {
			case cycle[name].devices && (!st.ok() || len(victims) == 0):
				// No victims free enough devices: not helpful, as above.
			case !st.ok():
				statuses[name] = st
			case len(victims) == 0:
				statuses[name] = reject(unresolvable, "expected at least one victim pod on node")
			default:
				c := &candidate{node: name, victims: victims, pdbViolations: violations}
				if violations == 0 {
					nonViolating = append(nonViolating, c)
				} else {
					violate = append(violate, c)
				}
				if len(nonViolating) > 0 && len(nonViolating)+len(violate) >= numCandidates {
					cancel()
				}
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for range max(1, min(p.cfg.Parallelism, len(potential))) {
		wg.Go(work)
	}
	wg.Wait()
	return append(nonViolating, violate...), statuses
}

// moreImportant orders pods by priority, then earlier start (a pod that has
// run longer loses more work); a pod not started yet counts as started at now.
func moreImportant(a, b *podInfo, now time.Time) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return startTime(a, now).Before(startTime(b, now))
}

func startTime(p *podInfo, now time.Time) time.Time {
	if p.pod.Status.StartTime == nil {
		return now
	}
	return p.pod.Status.StartTime.Time
}

// byImportanceAt is moreImportant as a sort order.
func byImportanceAt(now time.Time) func(a, b *podInfo) int {
	return func(a, b *podInfo) int {
		switch {
		case moreImportant(a, b, now):
			return -1
		case moreImportant(b, a, now):
			return 1
		default:
			return 0
		}
	}
}

// fitsWith checks the preemptor on n with the nominated pods that reserve
// room there, and without them (filterWithNominated).
func (p *preemptor) fitsWith(q *podQuery, n *nodeInfo) status {
	p.filterCalls.Add(1)
	return p.c.filterWithNominated(q, n)
}

// selectVictims is SelectVictimsOnNode: remove every lower-priority pod; if
// the preemptor then fits, add back as many as possible, PDB-violating pods
// first, each group most important first.
func (p *preemptor) selectVictims(q *podQuery, n *nodeInfo) ([]*podInfo, int, status) {
	var potential []*podInfo
	for _, pi := range n.pods {
		if pi.priority < q.priority {
			potential = append(potential, pi)
		}
	}
	if len(potential) == 0 {
		return nil, 0, reject(unresolvable, reasonNoVictims)
	}
	for _, pi := range potential {
		n.removePod(pi.pod.UID)
	}
	if st := p.fitsWith(q, n); !st.ok() {
		return nil, 0, st
	}
	slices.SortStableFunc(potential, byImportanceAt(p.now))
	violating, nonViolating := p.splitByPDB(potential)
	var victims []*podInfo
	numViolating := 0
	reprieve := func(pi *podInfo) bool {
		n.addPod(pi)
		if p.fitsWith(q, n).ok() {
			return true
		}
		n.removePod(pi.pod.UID)
		victims = append(victims, pi)
		return false
	}
	for _, pi := range violating {
		if !reprieve(pi) {
			numViolating++
		}
	}
	fromViolating := len(victims)
	for _, pi := range nonViolating {
		reprieve(pi)
	}
	if fromViolating > 0 && len(victims) > fromViolating {
		slices.SortStableFunc(victims, byImportanceAt(p.now))
	}
	return victims, numViolating, status{}
}

// splitByPDB classifies pods (in importance order) as violating a PDB or
// not, spending each PDB's allowed disruptions cumulatively. Pods already in
// a PDB's disruptedPods do not spend it; pods without labels never violate.
func (p *preemptor) splitByPDB(pods []*podInfo) (violating, nonViolating []*podInfo) {
	allowed := make([]int32, len(p.pdbs))
	for i, pdb := range p.pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
	}
	for _, pi := range pods {
		pod := pi.pod
		violates := false
		if len(pod.Labels) > 0 {
			for i, pdb := range p.pdbs {
				if pdb.Namespace != pod.Namespace {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
					continue
				}
				if _, disrupted := pdb.Status.DisruptedPods[pod.Name]; disrupted {
					continue
				}
				allowed[i]--
				if allowed[i] < 0 {
					violates = true
				}
			}
		}
		if violates {
			violating = append(violating, pi)
		} else {
			nonViolating = append(nonViolating, pi)
		}
	}
	return violating, nonViolating
}

// pick chooses among candidates lexicographically: fewest PDB violations,
// lowest highest-victim priority, lowest shifted priority sum, fewest
// victims, latest start of the highest-priority victims; then at random.
func (p *preemptor) pick(cands []*candidate) *candidate {
	if len(cands) == 0 {
		return nil
	}
	scores := []func(*candidate) int64{
		func(c *candidate) int64 { return -int64(c.pdbViolations) },
		func(c *candidate) int64 { return -int64(c.victims[0].priority) },
		func(c *candidate) int64 {
			var sum int64
			for _, v := range c.victims {
				sum += int64(v.priority) + math.MaxInt32 + 1
			}
			return -sum
		},
		func(c *candidate) int64 { return -int64(len(c.victims)) },
		func(c *candidate) int64 {
			top := c.victims[0].priority
			earliest := int64(math.MaxInt64)
			for _, v := range c.victims {
				if v.priority == top {
					earliest = min(earliest, startTime(v, p.now).UnixNano())
				}
			}
			return earliest
		},
	}
	tied := cands
	for _, score := range scores {
		if len(tied) == 1 {
			break
		}
		best := int64(math.MinInt64)
		var next []*candidate
		for _, c := range tied {
			switch s := score(c); {
			case s > best:
				best, next = s, []*candidate{c}
			case s == best:
				next = append(next, c)
			}
		}
		tied = next
	}
	return tied[p.rand.Intn(len(tied))]
}
