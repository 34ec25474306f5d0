package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The differential test's batch mode: where the main test decides one pod
// at a time, here every pod of a seed is created at once, so that the
// queue decides the order: priorities, scheduling gates, and pods that are
// unschedulable until an event (a node joining) makes them schedulable and
// must come back from the unschedulable pool or backoff; while preemptors
// are nominated, the other pods are filtered with their reservations (the
// two-pass nominated filter).
//
// Which pod a scheduler happens to try first depends on timing (the pods
// reach it while it is already scheduling, and kube-scheduler's backoffs
// are not nodeshepherd's), and so do the bindings made on the way and the
// preemptions that undo them. The workload is therefore built so that one
// thing does not: identical nodes but for their size, pods that all ask
// for one CPU, on nodes of two or four CPUs, more pods than room, and
// priorities that may all preempt. Whatever the order, the cluster then
// settles with the highest priorities bound (a pending pod of a higher
// priority than a bound one preempts it) and each node full. Compared
// after each phase, timing-independent: per priority, how many pods are
// bound (so, for a priority whose pods are all bound or all pending, the
// very set), and the condition of the gated pods; but not when one run
// left room unused (fewer pods bound in all), which kube-scheduler does
// when it leaves a pod nominated to a node it no longer fits.
//
// Logged, not compared, as they depend on timing: which pods of the one
// priority that is partly bound got the room, their nodes, how many
// preemptions it took and their victims (a pod bound early may be
// preempted later, and is then gone), so also how many pods are pending
// and which reasons they are left with (a run shows kube-scheduler and
// nodeshepherd each keeping reasons the other's preempted pods took away,
// and preemption's part of a message naming a node a nominated pod held at
// the time). The phases: (1) all pods created, a fifth of them gated and
// an eighth needing a node label no node has yet; (2) the gates removed;
// (3) a node with the label joins, tainted so that only those pods go
// there.

var diffBatchSeeds = []uint64{1, 2, 3}

const (
	diffBatchGoldenPath = "testdata/scheduler-differential-batch-kube-scheduler.json"
	diffBatchVersion    = 1
	diffBatchGate       = "example.com/batch-hold"
	diffBatchLabel      = "batch-ready"
)

// diffBatchClasses: every one may preempt the lower ones ("" is 0).
var diffBatchClasses = []string{"", "p10", "p20", "p50", "p1000"}

type diffBatchWorkload struct {
	Seed  uint64
	Nodes []*v1.Node
	Pods  []*v1.Pod
	// Late joins in phase 3.
	Late *v1.Node
}

func diffBatchWorkloadFor(seed uint64) *diffBatchWorkload {
	r := rand.New(rand.NewPCG(seed, diffBatchVersion))
	w := &diffBatchWorkload{Seed: seed}
	room := 0
	for i := range 6 + r.IntN(5) {
		name := fmt.Sprintf("b%d-n%02d", seed, i)
		cpu := pick[int64](r, 2, 4)
		room += int(cpu)
		alloc := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(16<<30, resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}
		w.Nodes = append(w.Nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc,
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}}}})
	}
	for i := range room * 2 {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b%03d", i), Namespace: metav1.NamespaceDefault},
			Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, TerminationGracePeriodSeconds: ptr.To[int64](0),
				PriorityClassName: pick(r, diffBatchClasses...),
				Containers: []v1.Container{{Name: "c", Image: diffPauseImage, Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
		switch r.IntN(40) {
		case 0, 1, 2, 3, 4, 5, 6, 7:
			p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: diffBatchGate}}
		case 8, 9, 10, 11, 12:
			p.Spec.NodeSelector = map[string]string{diffBatchLabel: "true"}
			p.Spec.Tolerations = []v1.Toleration{{Key: diffBatchLabel, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
		}
		w.Pods = append(w.Pods, p)
	}
	// Phase 3's node: the only one with the label, and tainted so that
	// only the pods waiting for it go there (the other pods' end state
	// stays the same whichever pods went first).
	alloc := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(4, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(16<<30, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	name := fmt.Sprintf("b%d-new", seed)
	w.Late = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name, diffBatchLabel: "true"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: diffBatchLabel, Value: "true", Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}}}}
	return w
}

func diffBatchPriority(class string) int32 {
	if class == "" {
		return 0
	}
	return priorityClasses[class]
}

// diffBatchPhase is the settled state after a phase: per priority class
// ("" is 0), the pods bound and the distinct reasons of the pending pods
// (their messages up to preemption's part, sorted); Gated is the
// PodScheduled reason of each still gated pod.
type diffBatchPhase struct {
	Bound   map[string]int      `json:"bound"`
	Pending map[string][]string `json:"pending,omitempty"`
	Gated   []string            `json:"gated,omitempty"`
	// Deleted (pods preempted so far) depends on timing: logged only,
	// and so does the number of pending pods (a preempted pod is gone).
	Deleted int `json:"deleted"`
}

type diffBatchSeedRecord struct {
	Seed   uint64           `json:"seed"`
	Phases []diffBatchPhase `json:"phases"`
}

type diffBatchGolden struct {
	Comment       string                `json:"comment"`
	KubeScheduler string                `json:"kubeScheduler"`
	InputsSHA256  string                `json:"inputsSHA256"`
	Seeds         []diffBatchSeedRecord `json:"seeds"`
}

func diffBatchInputsHash() string {
	var all []*diffBatchWorkload
	for _, s := range diffBatchSeeds {
		all = append(all, diffBatchWorkloadFor(s))
	}
	data, err := json.Marshal(struct {
		Version   int
		Workloads []*diffBatchWorkload
	}{diffBatchVersion, all})
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// runBatch runs one seed through the three phases on d's scheduler.
func (d *diffRun) runBatch(t *testing.T, w *diffBatchWorkload) diffBatchSeedRecord {
	t.Helper()
	ctx := framework.Context(t)
	d.setUpBatchNodes(t, w)
	rec := diffBatchSeedRecord{Seed: w.Seed}
	for _, p := range w.Pods {
		d.create(t, p.DeepCopy())
	}
	rec.Phases = append(rec.Phases, d.settleBatch(t, w, 1))
	for _, p := range w.Pods {
		if len(p.Spec.SchedulingGates) > 0 {
			if _, err := d.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.JSONPatchType,
				[]byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec.Phases = append(rec.Phases, d.settleBatch(t, w, 2))
	// One event, the node's creation with its status and taint (the
	// API server's not-ready taint is added to it): its status comes in a
	// second write, which is the one that lets pods fit.
	late := w.Late.DeepCopy()
	late.Spec.Taints = append(late.Spec.Taints, v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule})
	if _, err := d.client.CoreV1().Nodes().Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status, err := json.Marshal(map[string]any{"status": w.Late.Status})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CoreV1().Nodes().Patch(ctx, late.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	taints, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": w.Late.Spec.Taints}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CoreV1().Nodes().Patch(ctx, late.Name, types.MergePatchType, taints, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Phases = append(rec.Phases, d.settleBatch(t, w, 3))
	if err := d.client.CoreV1().Pods(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// The next seed's pods have the same names.
	framework.Eventually(t, time.Minute, fmt.Sprintf("batch seed %d: pods gone", w.Seed), func(ctx context.Context) (bool, string, error) {
		list, err := d.client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items)), nil
	})
	for _, n := range append(slices.Clone(w.Nodes), w.Late) {
		if err := d.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// setUpBatchNodes creates the nodes, as setUp does, and waits until a
// probe pod is bound to the last one (it has seen every node).
func (d *diffRun) setUpBatchNodes(t *testing.T, w *diffBatchWorkload) {
	t.Helper()
	ctx := framework.Context(t)
	nodes := d.client.CoreV1().Nodes()
	d.createNodes(t, w.Nodes)
	for _, n := range w.Nodes {
		if _, err := nodes.Patch(ctx, n.Name, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	last := w.Nodes[len(w.Nodes)-1].Name
	probe := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: metav1.NamespaceDefault},
		Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, NodeSelector: map[string]string{v1.LabelHostname: last},
			Containers: []v1.Container{{Name: "c", Image: diffPauseImage, Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")}}}}}}
	d.create(t, probe)
	if got := framework.WaitPodOutcome(t, d.client, probe.Namespace, probe.Name, 2*time.Minute); got.Node != last {
		// A first attempt before the last taint went is retried on it.
		framework.Eventually(t, 2*time.Minute, "batch probe bound to "+last, func(ctx context.Context) (bool, string, error) {
			p, err := d.client.CoreV1().Pods(probe.Namespace).Get(ctx, probe.Name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return p.Spec.NodeName == last, p.Spec.NodeName, nil
		})
	}
	d.remove(t, probe)
}

// settleBatch waits until the cluster has settled after the phase and
// returns its state. Settled: every pod that may be scheduled is bound or
// reported unschedulable (in phase 3, tried since the late node came), no
// pending pod has a higher priority than a pod bound where it could go,
// which it would preempt, and the state has not changed for 15 s.
func (d *diffRun) settleBatch(t *testing.T, w *diffBatchWorkload, phase int) diffBatchPhase {
	t.Helper()
	var out diffBatchPhase
	var why string
	defer func() {
		if t.Failed() {
			t.Logf("batch seed %d phase %d: last seen: %s", w.Seed, phase, why)
		}
	}()
	miss := func(s string) (bool, string, error) { why = s; return false, s, nil }
	var stable string
	var since time.Time
	framework.Eventually(t, 3*time.Minute, fmt.Sprintf("batch seed %d phase %d settled", w.Seed, phase), func(ctx context.Context) (bool, string, error) {
		list, err := d.client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		out = diffBatchPhase{Bound: map[string]int{}, Pending: map[string][]string{}, Deleted: len(w.Pods) - len(list.Items)}
		// The lowest priority bound on the old nodes and on the late one.
		lowestOld, lowestLate := int32(1<<30), int32(1<<30)
		var pending []*v1.Pod
		for i := range list.Items {
			p := &list.Items[i]
			prio := diffBatchPriority(p.Spec.PriorityClassName)
			if p.Spec.NodeName != "" {
				out.Bound[p.Spec.PriorityClassName]++
				if p.Spec.NodeName == w.Late.Name {
					lowestLate = min(lowestLate, prio)
				} else {
					lowestOld = min(lowestOld, prio)
				}
				continue
			}
			var cond *v1.PodCondition
			for j := range p.Status.Conditions {
				if p.Status.Conditions[j].Type == v1.PodScheduled {
					cond = &p.Status.Conditions[j]
				}
			}
			if len(p.Spec.SchedulingGates) > 0 {
				if cond == nil {
					return miss(diffKey(p) + " gated, without a condition yet")
				}
				out.Gated = append(out.Gated, cond.Reason)
				continue
			}
			if cond == nil || cond.Status != v1.ConditionFalse || cond.Reason != v1.PodReasonUnschedulable {
				return miss(diffKey(p) + " not decided yet")
			}
			// In phase 3, tried again since the late node came: every
			// pending pod could fit it but for its taint or label.
			if nodes := len(w.Nodes) + max(0, phase-2); !strings.HasPrefix(cond.Message, fmt.Sprintf("0/%d nodes", nodes)) {
				return miss(fmt.Sprintf("%s not tried on the %d nodes yet: %s", diffKey(p), nodes, cond.Message))
			}
			// The part before preemption's: which nodes reject the pod
			// and why; preemption's part can name a node whose room a
			// nominated pod held at the time (timing).
			filter, _, _ := strings.Cut(cond.Message, " preemption: ")
			if !slices.Contains(out.Pending[p.Spec.PriorityClassName], filter) {
				out.Pending[p.Spec.PriorityClassName] = append(out.Pending[p.Spec.PriorityClassName], filter)
			}
			pending = append(pending, p)
		}
		for _, msgs := range out.Pending {
			slices.Sort(msgs)
		}
		slices.Sort(out.Gated)
		for _, p := range pending {
			prio, lowest := diffBatchPriority(p.Spec.PriorityClassName), lowestOld
			if p.Spec.NodeSelector[diffBatchLabel] != "" {
				lowest = lowestLate // the only node with the label (phase 3)
				if phase < 3 {
					continue
				}
			}
			if prio > lowest {
				return miss(fmt.Sprintf("%s of priority %d could preempt a pod of priority %d", diffKey(p), prio, lowest))
			}
		}
		// And unchanged for longer than kube-scheduler's longest backoff
		// (10 s): a preemption under way (its preemptor nominated, its
		// victims going; kube-scheduler can also leave a pod nominated
		// to a node it no longer fits) ends in a binding within that.
		sig := fmt.Sprint(out.Bound, out.Pending, out.Gated, out.Deleted)
		if sig != stable {
			stable, since = sig, time.Now()
		}
		if wait := 15*time.Second - time.Since(since); wait > 0 {
			return miss(fmt.Sprintf("unchanged for %s", time.Since(since).Round(time.Second)))
		}
		return true, "", nil
	})
	return out
}

// TestSchedulerDifferentialBatch runs the batch workloads (see the top of
// this file) with nodeshepherd and requires, after each phase, kube-
// scheduler's count of bound pods per priority and the gated pods'
// condition, from testdata/scheduler-differential-batch-kube-scheduler.json
// (make golden-scheduler; -update-scheduler-golden records it first).
func TestSchedulerDifferentialBatch(t *testing.T) {
	var g diffBatchGolden
	if *updateSchedulerGolden {
		g = diffBatchGolden{Comment: "kube-scheduler's settled states for the batch workloads of scheduler_differential_batch_test.go; written by `make golden-scheduler`, do not edit",
			KubeScheduler: kubeSchedulerVersion(t), InputsSHA256: diffBatchInputsHash()}
		t.Run("kube-scheduler", func(t *testing.T) {
			d := startDiffRun(t, true)
			for _, seed := range diffBatchSeeds {
				g.Seeds = append(g.Seeds, d.runBatch(t, diffBatchWorkloadFor(seed)))
			}
		})
		if t.Failed() {
			t.Fatalf("kube-scheduler's run failed; %s left as it was", diffBatchGoldenPath)
		}
		data, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(diffBatchGoldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(diffBatchGoldenPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		data, err := os.ReadFile(diffBatchGoldenPath)
		if err != nil {
			t.Fatalf("%v; %s", err, diffRefresh)
		}
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		if h := diffBatchInputsHash(); g.InputsSHA256 != h {
			t.Fatalf("%s is stale (inputs sha256 %s, recorded %s); %s", diffBatchGoldenPath, h, g.InputsSHA256, diffRefresh)
		}
		if v := kubeSchedulerVersion(t); g.KubeScheduler != v {
			t.Fatalf("%s was recorded with kube-scheduler %s, the control plane is %s; %s", diffBatchGoldenPath, g.KubeScheduler, v, diffRefresh)
		}
		if len(g.Seeds) != len(diffBatchSeeds) {
			t.Fatalf("%s records %d seeds, the test has %d; %s", diffBatchGoldenPath, len(g.Seeds), len(diffBatchSeeds), diffRefresh)
		}
	}
	d := startDiffRun(t, false)
	compared, skipped := 0, 0
	for i, seed := range diffBatchSeeds {
		w := diffBatchWorkloadFor(seed)
		got := d.runBatch(t, w)
		want := g.Seeds[i]
		for ph := range want.Phases {
			wp, gp := want.Phases[ph], got.Phases[ph]
			where := fmt.Sprintf("batch seed %d phase %d", seed, ph+1)
			sum := func(m map[string]int) (n int) {
				for _, v := range m {
					n += v
				}
				return n
			}
			switch {
			case sum(wp.Bound) != sum(gp.Bound):
				// One run left room unused: kube-scheduler can leave a pod
				// nominated to a node it no longer fits, whose room the
				// others then see as taken (a run showed it). Timing.
				skipped++
				t.Logf("%s: %d pods bound, kube-scheduler %d: room left unused in one run, not compared (bound %v, kube-scheduler %v)",
					where, sum(gp.Bound), sum(wp.Bound), gp.Bound, wp.Bound)
			case !maps.Equal(wp.Bound, gp.Bound):
				t.Errorf("%s: bound per priority class %v, kube-scheduler %v", where, gp.Bound, wp.Bound)
			}
			if !reflect.DeepEqual(wp.Pending, gp.Pending) {
				// Which pods are left to give a reason depends on which
				// were preempted on the way (timing): logged only.
				t.Logf("%s: pending pods' reasons per priority class (timing-dependent, not compared)\n nodeshepherd:   %v\n kube-scheduler: %v", where, gp.Pending, wp.Pending)
			}
			if !slices.Equal(wp.Gated, gp.Gated) {
				t.Errorf("%s: gated pods' reasons %v, kube-scheduler %v", where, gp.Gated, wp.Gated)
			}
			compared++
			t.Logf("%s: bound %v, %d distinct reasons for pending pods, %d gated; pods preempted so far %d (kube-scheduler %d, timing-dependent)",
				where, gp.Bound, diffBatchCount(gp.Pending), len(gp.Gated), gp.Deleted, wp.Deleted)
		}
	}
	t.Logf("%d settled states of %d batch seeds, %d of them compared (the others left room unused in one run)", compared, len(diffBatchSeeds), compared-skipped)
}

func diffBatchCount(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}
