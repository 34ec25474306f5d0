package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The differential test: seeded random workloads (nodes in three zones,
// pods mixing resources, node selection, taints, inter-pod affinity and
// topology spread) are scheduled one pod at a time by kube-scheduler, whose
// decisions are recorded (make golden-scheduler), and then by nodeshepherd.
//
// kube-scheduler breaks ties between equally scored nodes at random, so the
// two runs would drift apart after the first tie and later pods would see
// different clusters. The test therefore replays kube-scheduler's run: after
// nodeshepherd decides a pod, the pod is moved to kube-scheduler's node
// (deleted and created again with spec.nodeName) when the nodes differ, and
// a pending pod is deleted in both runs (it could otherwise be placed later,
// at a time that depends on backoffs). Every decision is thus taken on the
// same cluster by both schedulers, and compared: placed or pending, the
// message of a pending pod, and every placement is checked against the
// hard constraints by an independent checker (diffChecker below). The
// recording also keeps the nodes kube-scheduler scored highest (its V(10)
// final scores); a nodeshepherd placement outside them is a difference in
// scoring, logged with the share of identical placements.

var updateSchedulerGolden = flag.Bool("update-scheduler-golden", false,
	"run kube-scheduler on the differential workloads and rewrite "+diffGoldenPath+" (make golden-scheduler)")

const (
	diffGoldenPath = "testdata/scheduler-differential-kube-scheduler.json"
	diffRefresh    = "run `make golden-scheduler` (runs kube-scheduler on every seed, about a minute) and commit " + diffGoldenPath
	// diffGeneratorVersion changes whenever diffWorkloadFor changes what it
	// generates; it seeds the generator, so a change re-records.
	diffGeneratorVersion = 2
	diffNamespace        = metav1.NamespaceDefault
	diffPauseImage       = "registry.k8s.io/pause:3.10"
	diffGPUTaintKey      = "dedicated"
	diffSpotTaintKey     = "spot"
	diffMaintTaintKey    = "maintenance"
)

var diffSeeds = []uint64{1, 2, 3, 4, 5}

// diffWorkload is one seed's cluster: nodes in creation order and pods in
// scheduling order.
type diffWorkload struct {
	Seed  uint64
	Nodes []*v1.Node
	Pods  []*v1.Pod
}

// diffPodFeatures add constraints to a generated pod, in this order, each
// drawing from the seed's generator. Volume cases (PVCs, StorageClasses)
// belong here as another feature, with the objects they need created by
// diffRun.setUp before the pods.
var diffPodFeatures = []func(r *rand.Rand, w *diffWorkload, p *v1.Pod){
	diffResources, diffNodeSelection, diffTolerations, diffInterPodAffinity, diffSpread, diffPriority,
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func diffWorkloadFor(seed uint64) *diffWorkload {
	r := rand.New(rand.NewPCG(seed, diffGeneratorVersion))
	w := &diffWorkload{Seed: seed}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	nodes := 12 + r.IntN(19)
	for i := range nodes {
		name := fmt.Sprintf("s%d-n%02d", seed, i)
		l := map[string]string{v1.LabelHostname: name, "disk": pick(r, "ssd", "hdd"), "tier": pick(r, "1", "2", "3")}
		if i < 3 || r.IntN(12) != 0 {
			l[zoneKey] = zones[i%3] // a few nodes lack the zone label
		}
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
		switch r.IntN(10) {
		case 0:
			l["gpu"] = "true"
			n.Spec.Taints = []v1.Taint{{Key: diffGPUTaintKey, Value: "gpu", Effect: v1.TaintEffectNoSchedule}}
		case 1:
			n.Spec.Taints = []v1.Taint{{Key: diffSpotTaintKey, Value: "true", Effect: v1.TaintEffectNoExecute}}
		case 2:
			n.Spec.Taints = []v1.Taint{{Key: diffMaintTaintKey, Effect: v1.TaintEffectPreferNoSchedule}}
		case 3:
			l["gpu"] = "true"
		}
		n.Spec.Unschedulable = r.IntN(15) == 0
		maxPods := int64(110)
		if r.IntN(6) == 0 {
			maxPods = 3
		}
		alloc := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(pick[int64](r, 1000, 2000, 4000), resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(pick[int64](r, 2, 4, 8)<<30, resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(maxPods, resource.DecimalSI),
		}
		n.Status = v1.NodeStatus{Capacity: alloc, Allocatable: alloc,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}}}
		w.Nodes = append(w.Nodes, n)
	}
	pods := 40 + r.IntN(41)
	for i := range pods {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%02d", i), Namespace: diffNamespace,
			Labels: map[string]string{"app": pick(r, "web", "api", "db", "cache", "batch")}},
			Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []v1.Container{{Name: "c", Image: diffPauseImage}}}}
		if r.IntN(4) == 0 {
			p.Labels["role"] = "leader"
		}
		p.Labels["version"] = pick(r, "v1", "v2") // for matchLabelKeys
		for _, f := range diffPodFeatures {
			f(r, w, p)
		}
		w.Pods = append(w.Pods, p)
	}
	return w
}

// diffResources: requests of every pod; a few fit no node.
func diffResources(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	cpu := pick[int64](r, 100, 200, 500, 1000)
	if r.IntN(15) == 0 {
		cpu = 5000
	}
	mem := pick[int64](r, 128, 256, 512, 1024) << 20
	if r.IntN(20) == 0 {
		mem = 16 << 30
	}
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(cpu, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI)}
}

// diffNodeSelection: nodeSelector, required and preferred node affinity.
func diffNodeSelection(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	if r.IntN(8) == 0 {
		p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	}
	na := &v1.NodeAffinity{}
	if r.IntN(6) == 0 {
		terms := [][]v1.NodeSelectorRequirement{
			{{Key: "tier", Operator: v1.NodeSelectorOpIn, Values: []string{"1", "2"}}},
			{{Key: "gpu", Operator: v1.NodeSelectorOpExists}},
			{{Key: "gpu", Operator: v1.NodeSelectorOpDoesNotExist}, {Key: zoneKey, Operator: v1.NodeSelectorOpNotIn, Values: []string{"zone-c"}}},
			{{Key: "tier", Operator: v1.NodeSelectorOpGt, Values: []string{"2"}}},
		}
		sel := &v1.NodeSelector{}
		for range 1 + r.IntN(2) {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, v1.NodeSelectorTerm{MatchExpressions: pick(r, terms...)})
		}
		na.RequiredDuringSchedulingIgnoredDuringExecution = sel
	}
	if r.IntN(4) == 0 {
		na.PreferredDuringSchedulingIgnoredDuringExecution = []v1.PreferredSchedulingTerm{{Weight: 1 + r.Int32N(100),
			Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				pick(r, v1.NodeSelectorRequirement{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"ssd"}},
					v1.NodeSelectorRequirement{Key: "tier", Operator: v1.NodeSelectorOpIn, Values: []string{"3"}})}}}}
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution != nil || na.PreferredDuringSchedulingIgnoredDuringExecution != nil {
		diffAffinity(p).NodeAffinity = na
	}
}

func diffAffinity(p *v1.Pod) *v1.Affinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &v1.Affinity{}
	}
	return p.Spec.Affinity
}

// diffTolerations of the generated taints, of cordoned nodes, of all.
func diffTolerations(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	if r.IntN(5) == 0 {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: diffGPUTaintKey, Operator: v1.TolerationOpEqual, Value: "gpu", Effect: v1.TaintEffectNoSchedule})
	}
	if r.IntN(6) == 0 {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: diffSpotTaintKey, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	}
	if r.IntN(20) == 0 {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule})
	}
	if r.IntN(30) == 0 {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Operator: v1.TolerationOpExists})
	}
}

// diffInterPodAffinity: required and preferred affinity to another app or
// role, anti-affinity to the pod's own app, per hostname or zone.
func diffInterPodAffinity(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	term := func(match map[string]string) v1.PodAffinityTerm {
		return podTerm(pick(r, v1.LabelHostname, zoneKey), match)
	}
	other := func() map[string]string {
		if r.IntN(3) == 0 {
			return map[string]string{"role": "leader"}
		}
		return map[string]string{"app": pick(r, "web", "api", "db", "cache", "batch")}
	}
	own := map[string]string{"app": p.Labels["app"]}
	if r.IntN(8) == 0 {
		pa := &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term(other())}}
		diffAffinity(p).PodAffinity = pa
	}
	if r.IntN(6) == 0 {
		if diffAffinity(p).PodAffinity == nil {
			p.Spec.Affinity.PodAffinity = &v1.PodAffinity{}
		}
		p.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []v1.WeightedPodAffinityTerm{
			{Weight: 1 + r.Int32N(100), PodAffinityTerm: term(other())}}
	}
	if r.IntN(5) == 0 {
		t := term(own)
		if r.IntN(2) == 0 {
			t.MatchLabelKeys = []string{"version"}
		}
		diffAffinity(p).PodAntiAffinity = &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{t}}
	}
	if r.IntN(6) == 0 {
		if diffAffinity(p).PodAntiAffinity == nil {
			p.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{}
		}
		p.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []v1.WeightedPodAffinityTerm{
			{Weight: 1 + r.Int32N(100), PodAffinityTerm: term(other())}}
	}
}

// diffSpread: one or two constraints (distinct keys) on the pod's own app.
func diffSpread(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	if r.IntN(3) != 0 {
		return
	}
	keys := []string{zoneKey, v1.LabelHostname}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, key := range keys[:1+r.IntN(2)] {
		c := v1.TopologySpreadConstraint{MaxSkew: 1 + r.Int32N(2), TopologyKey: key, WhenUnsatisfiable: v1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Labels["app"]}}}
		if r.IntN(3) == 0 {
			c.WhenUnsatisfiable = v1.ScheduleAnyway
		} else if r.IntN(4) == 0 {
			c.MinDomains = ptr.To(pick[int32](r, 3, 4))
		}
		if r.IntN(4) == 0 {
			c.NodeAffinityPolicy = ptr.To(v1.NodeInclusionPolicyIgnore)
		}
		if r.IntN(3) == 0 {
			c.NodeTaintsPolicy = ptr.To(v1.NodeInclusionPolicyHonor)
		}
		if r.IntN(4) == 0 {
			c.MatchLabelKeys = []string{"version"}
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}

// diffPriority: priorities that never preempt (createPriorityClasses), so
// that one pod's decision never depends on another being evicted.
func diffPriority(r *rand.Rand, _ *diffWorkload, p *v1.Pod) {
	p.Spec.PriorityClassName = pick(r, "", "", "p100-never", "p1000-never")
}

// diffInputs is what the golden file was recorded from.
func diffInputs() []byte {
	var all []*diffWorkload
	for _, s := range diffSeeds {
		all = append(all, diffWorkloadFor(s))
	}
	data, err := json.Marshal(struct {
		Generator int
		Workloads []*diffWorkload
	}{diffGeneratorVersion, all})
	if err != nil {
		panic(err)
	}
	return data
}

func diffInputsHash() string {
	sum := sha256.Sum256(diffInputs())
	return hex.EncodeToString(sum[:])
}

// diffGolden is the golden file: kube-scheduler's decision for every pod of
// every seed, in scheduling order.
type diffGolden struct {
	Comment       string           `json:"comment"`
	KubeScheduler string           `json:"kubeScheduler"`
	InputsSHA256  string           `json:"inputsSHA256"`
	Seeds         []diffSeedRecord `json:"seeds"`
}

type diffSeedRecord struct {
	Seed      uint64         `json:"seed"`
	Nodes     int            `json:"nodes"`
	Decisions []diffDecision `json:"decisions"`
}

type diffDecision struct {
	Pod     string   `json:"pod"`
	Node    string   `json:"node,omitempty"`    // "": left pending
	Best    []string `json:"best,omitempty"`    // the nodes with kube-scheduler's highest final score, one of which it chose
	Message string   `json:"message,omitempty"` // PodScheduled's, when pending
}

func loadDiffGolden(t *testing.T) *diffGolden {
	t.Helper()
	data, err := os.ReadFile(diffGoldenPath)
	if err != nil {
		t.Fatalf("kube-scheduler's recorded decisions: %v; %s", err, diffRefresh)
	}
	var g diffGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v; %s", diffGoldenPath, err, diffRefresh)
	}
	if h := diffInputsHash(); g.InputsSHA256 != h {
		t.Fatalf("%s is stale: the generated workloads changed since it was recorded (inputs sha256 %s, recorded %s); %s",
			diffGoldenPath, h, g.InputsSHA256, diffRefresh)
	}
	if v := kubeSchedulerVersion(t); g.KubeScheduler != v {
		t.Fatalf("%s was recorded with kube-scheduler %s, the control plane is %s; %s", diffGoldenPath, g.KubeScheduler, v, diffRefresh)
	}
	var seeds []uint64
	for _, s := range g.Seeds {
		seeds = append(seeds, s.Seed)
	}
	if !slices.Equal(seeds, diffSeeds) {
		t.Fatalf("%s records seeds %v, the test has %v; %s", diffGoldenPath, seeds, diffSeeds, diffRefresh)
	}
	return &g
}

// diffRun is one control plane on which the seeds run one after another,
// scheduled by kube-scheduler (upstream) or by nodeshepherd under the name
// default-scheduler, so that the pods are identical in both runs.
type diffRun struct {
	client kubernetes.Interface
	pc     *preemptionCluster // for create
	// kube-scheduler's log, with its final node scores (V(10) of
	// schedule_one.go), read from offset on.
	scoreLog string
	offset   int64
}

func startDiffRun(t *testing.T, upstream bool) *diffRun {
	t.Helper()
	cfg := controlplane.Config{ControllerManager: true, Scheduler: upstream}
	if upstream {
		cfg.SchedulerArgs = []string{"--vmodule=schedule_one=10"}
	}
	cp := startControlPlaneAlone(t, cfg)
	client := framework.Client(t, cp)
	if !upstream {
		ctrl := fastLifecycle(100)
		ctrl.Scheduler.SchedulerName = v1.DefaultSchedulerName
		ctrl.Scheduler.PodInitialBackoff = 100 * time.Millisecond
		ctrl.Scheduler.PodMaxBackoff = time.Second
		framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = []string{scheduler.Name} })
	}
	createPriorityClasses(t, client)
	return &diffRun{client: client, pc: &preemptionCluster{client: client}, scoreLog: filepath.Join(cp.Dir(), "logs", controlplane.Scheduler+".log")}
}

var finalScore = regexp.MustCompile(`"Calculated node's final score for pod" pod="([^"]+)" node="([^"]+)" score=(\d+)`)

// best returns the nodes kube-scheduler gave the highest final score for
// the pod it just bound (written before the binding), or only the chosen
// node when it scored none (a single feasible node).
func (d *diffRun) best(t *testing.T, p *v1.Pod, chosen string) []string {
	t.Helper()
	f, err := os.Open(d.scoreLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(d.offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	d.offset += int64(len(data))
	scores := map[string]int{}
	for _, m := range finalScore.FindAllStringSubmatch(string(data), -1) {
		if m[1] == p.Namespace+"/"+p.Name {
			scores[m[2]], _ = strconv.Atoi(m[3])
		}
	}
	if len(scores) == 0 {
		return []string{chosen}
	}
	top := slices.Max(slices.Collect(maps.Values(scores)))
	var best []string
	for n, s := range scores {
		if s == top {
			best = append(best, n)
		}
	}
	slices.Sort(best)
	if !slices.Contains(best, chosen) {
		t.Fatalf("kube-scheduler bound %s to %s, but its best-scored nodes were %v (scores %v)", p.Name, chosen, best, scores)
	}
	return best
}

// setUp creates the seed's nodes. They are Node objects without a kubelet:
// no heartbeat, no node lifecycle controller, nothing changes them during
// the run. The API server's TaintNodesByCondition admission gives every new
// node the not-ready taint, replaced here by the generated taints. A probe
// pod bound to the last node (tolerating its taints, not the not-ready
// one) shows that the scheduler has seen every node as generated: node
// events reach it in order.
func (d *diffRun) setUp(t *testing.T, w *diffWorkload) {
	t.Helper()
	ctx := framework.Context(t)
	nodes := d.client.CoreV1().Nodes()
	// Merge patches: kube-controller-manager's TTL controller annotates new
	// nodes meanwhile.
	for _, n := range w.Nodes {
		if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		status, err := json.Marshal(map[string]any{"status": n.Status})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Patch(ctx, n.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range w.Nodes {
		taints, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": n.Spec.Taints}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Patch(ctx, n.Name, types.MergePatchType, taints, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	last := w.Nodes[len(w.Nodes)-1]
	probe := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: diffNamespace},
		Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, NodeSelector: map[string]string{v1.LabelHostname: last.Name},
			Tolerations: []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists}},
			Containers: []v1.Container{{Name: "c", Image: diffPauseImage, Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")}}}}}}
	for _, taint := range last.Spec.Taints {
		probe.Spec.Tolerations = append(probe.Spec.Tolerations, v1.Toleration{Key: taint.Key, Operator: v1.TolerationOpExists})
	}
	d.pc.create(t, probe)
	// Its first attempt may come before the last taint change: it is then
	// retried on that node event.
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("seed %d: probe pod bound to %s", w.Seed, last.Name), func(ctx context.Context) (bool, string, error) {
		p, err := d.client.CoreV1().Pods(diffNamespace).Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != last.Name {
			return false, "", fmt.Errorf("probe pod bound to %s", p.Spec.NodeName)
		}
		return p.Spec.NodeName == last.Name, fmt.Sprintf("conditions %v", p.Status.Conditions), nil
	})
	d.remove(t, probe.Name)
}

// tearDown removes the seed's pods and nodes.
func (d *diffRun) tearDown(t *testing.T, w *diffWorkload) {
	t.Helper()
	ctx := framework.Context(t)
	if err := d.client.CoreV1().Pods(diffNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range w.Nodes {
		if err := d.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// remove deletes a pod at once: its node has no kubelet to confirm it.
func (d *diffRun) remove(t *testing.T, name string) {
	t.Helper()
	if err := d.client.CoreV1().Pods(diffNamespace).Delete(framework.Context(t), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}

// decide creates the pod and waits for the scheduler's decision.
func (d *diffRun) decide(t *testing.T, p *v1.Pod) framework.PodDecision {
	t.Helper()
	d.pc.create(t, p.DeepCopy())
	return framework.WaitPodDecision(t, d.client, diffNamespace, p.Name, 60*time.Second)
}

// pin replaces the pod with one bound to node, as kube-scheduler placed it.
func (d *diffRun) pin(t *testing.T, p *v1.Pod, node string) {
	t.Helper()
	d.remove(t, p.Name)
	q := p.DeepCopy()
	q.Spec.NodeName = node
	d.pc.create(t, q)
}

// recordDiffGolden runs every seed with kube-scheduler and writes the file.
func recordDiffGolden(t *testing.T) *diffGolden {
	t.Helper()
	g := &diffGolden{
		Comment:       "kube-scheduler's decisions for the seeded workloads of scheduler_differential_test.go; written by `make golden-scheduler`, do not edit",
		KubeScheduler: kubeSchedulerVersion(t),
		InputsSHA256:  diffInputsHash(),
	}
	t.Run("kube-scheduler", func(t *testing.T) {
		d := startDiffRun(t, true)
		for _, seed := range diffSeeds {
			w := diffWorkloadFor(seed)
			d.setUp(t, w)
			rec := diffSeedRecord{Seed: seed, Nodes: len(w.Nodes)}
			chk := newDiffChecker(w.Nodes)
			for _, p := range w.Pods {
				got := d.decide(t, p)
				dec := diffDecision{Pod: p.Name, Node: got.Node, Message: got.Message}
				if dec.Node != "" {
					dec.Best = d.best(t, p, dec.Node)
				}
				chk.verify(t, fmt.Sprintf("seed %d: kube-scheduler", seed), p, dec.Node)
				if dec.Node == "" {
					d.remove(t, p.Name)
				} else {
					chk.place(p, dec.Node)
				}
				rec.Decisions = append(rec.Decisions, dec)
			}
			d.tearDown(t, w)
			g.Seeds = append(g.Seeds, rec)
		}
	})
	if t.Failed() {
		t.Fatalf("kube-scheduler's run failed; %s left as it was", diffGoldenPath)
	}
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(diffGoldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(diffGoldenPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: kube-scheduler %s, seeds %v", diffGoldenPath, g.KubeScheduler, diffSeeds)
	return g
}

// TestSchedulerDifferentialKubeScheduler schedules the seeded workloads
// with nodeshepherd, one pod at a time on kube-scheduler's cluster state
// (see the comment at the top of the file), and requires for every pod the
// same verdict as kube-scheduler (placed or pending, and for a pending pod
// the same message) and a placement within every hard constraint. The node
// itself may differ where scores tie; the share of identical nodes, and
// of nodes among kube-scheduler's best-scored, is logged. kube-scheduler's decisions come from
// testdata/scheduler-differential-kube-scheduler.json (make
// golden-scheduler, which runs this test with -update-scheduler-golden);
// the file names the hash of the generated workloads and the kube-scheduler
// version, so a change of either fails here until it is re-recorded.
func TestSchedulerDifferentialKubeScheduler(t *testing.T) {
	var g *diffGolden
	if *updateSchedulerGolden {
		g = recordDiffGolden(t)
	} else {
		g = loadDiffGolden(t)
	}
	d := startDiffRun(t, false)
	var placed, same, pending, best int
	for i, seed := range diffSeeds {
		w := diffWorkloadFor(seed)
		rec := g.Seeds[i]
		d.setUp(t, w)
		chk := newDiffChecker(w.Nodes)
		seedPlaced, seedSame, seedPending, seedBest := 0, 0, 0, 0
		for j, p := range w.Pods {
			want := rec.Decisions[j]
			where := fmt.Sprintf("seed %d pod %s", seed, p.Name)
			chk.verify(t, where+": kube-scheduler (recorded)", p, want.Node)
			got := d.decide(t, p)
			chk.verify(t, where+": nodeshepherd", p, got.Node)
			switch {
			case want.Node == "" && got.Node == "":
				seedPending++
				if got.Message != want.Message {
					t.Errorf("%s: pending with different messages\n kube-scheduler: %q\n nodeshepherd:   %q", where, want.Message, got.Message)
				}
				d.remove(t, p.Name)
			case want.Node == "":
				t.Errorf("%s: nodeshepherd placed it on %s, kube-scheduler left it pending: %q\n pod: %s", where, got.Node, want.Message, diffDescribe(p))
				d.remove(t, p.Name)
			case got.Node == "":
				t.Errorf("%s: nodeshepherd left it pending (%q), kube-scheduler placed it on %s\n pod: %s", where, got.Message, want.Node, diffDescribe(p))
				d.pin(t, p, want.Node)
			default:
				seedPlaced++
				if slices.Contains(want.Best, got.Node) {
					seedBest++
				} else {
					// Scores are kube-scheduler's (balanced allocation as in 1.37 included): a
					// placement outside its best-scored nodes is a scoring difference.
					t.Errorf("%s: nodeshepherd chose %s, kube-scheduler's best-scored nodes were %v (it chose %s)", where, got.Node, want.Best, want.Node)
				}
				if got.Node == want.Node {
					seedSame++
				} else {
					d.pin(t, p, want.Node)
				}
			}
			if want.Node != "" {
				chk.place(p, want.Node)
			}
		}
		d.tearDown(t, w)
		t.Logf("seed %d: %d nodes, %d pods: %d placed by both (%d on the same node, %d on one of kube-scheduler's best-scored nodes), %d pending for both",
			seed, len(w.Nodes), len(w.Pods), seedPlaced, seedSame, seedBest, seedPending)
		placed, same, pending, best = placed+seedPlaced, same+seedSame, pending+seedPending, best+seedBest
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(placed, 1)) }
	t.Logf("identical placements: %d of %d placed pods (%.0f%%); on one of kube-scheduler's best-scored nodes: %d (%.0f%%); %d pods pending for both",
		same, placed, pct(same), best, pct(best), pending)
}

func diffDescribe(p *v1.Pod) string {
	b, _ := json.Marshal(struct {
		Labels map[string]string
		Spec   v1.PodSpec
	}{p.Labels, p.Spec})
	return string(b)
}

// diffChecker knows the cluster as the scheduler should see it (the nodes
// and the pods placed so far) and says, independently of either scheduler,
// which nodes satisfy a pod's hard constraints.
type diffChecker struct {
	nodes []*v1.Node
	pods  map[string][]*v1.Pod // by node
}

func newDiffChecker(nodes []*v1.Node) *diffChecker {
	return &diffChecker{nodes: nodes, pods: map[string][]*v1.Pod{}}
}

func (c *diffChecker) place(p *v1.Pod, node string) {
	c.pods[node] = append(c.pods[node], p)
}

// verify checks a decision: a placement must be on a node that satisfies
// every constraint, and a pod is left pending only when no node does.
func (c *diffChecker) verify(t *testing.T, who string, p *v1.Pod, node string) {
	t.Helper()
	var fits []string
	for _, n := range c.nodes {
		why := c.violations(p, n)
		if n.Name == node && len(why) > 0 {
			t.Errorf("%s: placed on %s, which breaks %s\n pod: %s", who, node, strings.Join(why, "; "), diffDescribe(p))
		}
		if len(why) == 0 {
			fits = append(fits, n.Name)
		}
	}
	if node == "" && len(fits) > 0 {
		t.Errorf("%s: left pending, but %v satisfy every constraint\n pod: %s", who, fits, diffDescribe(p))
	}
}

// violations lists the hard constraints the pod breaks on node n.
func (c *diffChecker) violations(p *v1.Pod, n *v1.Node) []string {
	var why []string
	if n.Spec.Unschedulable && !tolerates(p.Spec.Tolerations, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}) {
		why = append(why, "cordoned")
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect != v1.TaintEffectPreferNoSchedule && !tolerates(p.Spec.Tolerations, taint) {
			why = append(why, "taint "+taint.Key)
		}
	}
	if !nodeSelected(p, n) {
		why = append(why, "node selector/affinity")
	}
	why = append(why, c.resources(p, n)...)
	why = append(why, c.spread(p, n)...)
	why = append(why, c.interPod(p, n)...)
	return why
}

func tolerates(tols []v1.Toleration, taint v1.Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && tol.Effect != taint.Effect {
			continue
		}
		if tol.Key == "" && tol.Operator == v1.TolerationOpExists {
			return true
		}
		if tol.Key != taint.Key {
			continue
		}
		if tol.Operator == v1.TolerationOpExists || tol.Value == taint.Value {
			return true
		}
	}
	return false
}

func untoleratedTaint(p *v1.Pod, n *v1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Effect != v1.TaintEffectPreferNoSchedule && !tolerates(p.Spec.Tolerations, taint) {
			return true
		}
	}
	return false
}

// nodeSelected: nodeSelector and required node affinity.
func nodeSelected(p *v1.Pod, n *v1.Node) bool {
	for k, v := range p.Spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n.Labels) {
			return true
		}
	}
	return false
}

func termMatches(term v1.NodeSelectorTerm, l map[string]string) bool {
	for _, req := range term.MatchExpressions {
		v, ok := l[req.Key]
		var match bool
		switch req.Operator {
		case v1.NodeSelectorOpIn:
			match = ok && slices.Contains(req.Values, v)
		case v1.NodeSelectorOpNotIn:
			match = !ok || !slices.Contains(req.Values, v)
		case v1.NodeSelectorOpExists:
			match = ok
		case v1.NodeSelectorOpDoesNotExist:
			match = !ok
		case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
			var have, want int64
			_, err1 := fmt.Sscan(v, &have)
			_, err2 := fmt.Sscan(req.Values[0], &want)
			match = ok && err1 == nil && err2 == nil && (req.Operator == v1.NodeSelectorOpGt && have > want || req.Operator == v1.NodeSelectorOpLt && have < want)
		}
		if !match {
			return false
		}
	}
	return len(term.MatchExpressions) > 0
}

func (c *diffChecker) resources(p *v1.Pod, n *v1.Node) []string {
	var why []string
	on := c.pods[n.Name]
	if int64(len(on))+1 > n.Status.Allocatable.Pods().Value() {
		why = append(why, "too many pods")
	}
	for _, res := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		used := p.Spec.Containers[0].Resources.Requests[res].DeepCopy()
		for _, q := range on {
			used.Add(q.Spec.Containers[0].Resources.Requests[res])
		}
		if alloc := n.Status.Allocatable[res]; used.Cmp(alloc) > 0 {
			why = append(why, "insufficient "+string(res))
		}
	}
	return why
}

// selects: the selector, narrowed by matchLabelKeys to the owner's values
// of those keys (as the API server stores it), matches l.
func selects(sel *metav1.LabelSelector, keys []string, owner *v1.Pod, l map[string]string) bool {
	sel = sel.DeepCopy()
	for _, k := range keys {
		if v, ok := owner.Labels[k]; ok {
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

// spread: every DoNotSchedule constraint. Domains are counted over the
// nodes that have every such constraint's key and, per the constraint's
// policies, match the pod's node selection and have no taint it does not
// tolerate; fewer domains than minDomains make the lowest count 0.
func (c *diffChecker) spread(p *v1.Pod, n *v1.Node) []string {
	var hard []v1.TopologySpreadConstraint
	for _, sc := range p.Spec.TopologySpreadConstraints {
		if sc.WhenUnsatisfiable == v1.DoNotSchedule {
			hard = append(hard, sc)
		}
	}
	var why []string
	for _, sc := range hard {
		value, ok := n.Labels[sc.TopologyKey]
		if !ok {
			why = append(why, "spread: no "+sc.TopologyKey)
			continue
		}
		counts := map[string]int{}
		for _, m := range c.nodes {
			if slices.ContainsFunc(hard, func(o v1.TopologySpreadConstraint) bool { _, ok := m.Labels[o.TopologyKey]; return !ok }) {
				continue
			}
			if ptr.Deref(sc.NodeAffinityPolicy, v1.NodeInclusionPolicyHonor) == v1.NodeInclusionPolicyHonor && !nodeSelected(p, m) {
				continue
			}
			if ptr.Deref(sc.NodeTaintsPolicy, v1.NodeInclusionPolicyIgnore) == v1.NodeInclusionPolicyHonor && untoleratedTaint(p, m) {
				continue
			}
			d := m.Labels[sc.TopologyKey]
			counts[d] += 0
			for _, q := range c.pods[m.Name] {
				if q.Namespace == p.Namespace && selects(sc.LabelSelector, sc.MatchLabelKeys, p, q.Labels) {
					counts[d]++
				}
			}
		}
		low := -1
		for _, k := range counts {
			if low < 0 || k < low {
				low = k
			}
		}
		if low < 0 || len(counts) < int(ptr.Deref(sc.MinDomains, 1)) {
			low = 0
		}
		self := 0
		if selects(sc.LabelSelector, sc.MatchLabelKeys, p, p.Labels) {
			self = 1
		}
		if counts[value]+self-low > int(sc.MaxSkew) {
			why = append(why, fmt.Sprintf("spread on %s: %d+%d-%d > %d", sc.TopologyKey, counts[value], self, low, sc.MaxSkew))
		}
	}
	return why
}

// termSelects: an affinity term of owner (no namespace fields in the
// generated pods: owner's namespace) selects q.
func termSelects(term v1.PodAffinityTerm, owner, q *v1.Pod) bool {
	return q.Namespace == owner.Namespace && selects(term.LabelSelector, term.MatchLabelKeys, owner, q.Labels)
}

// interPod: the pod's required affinity and anti-affinity, and the
// required anti-affinity of the pods already placed.
func (c *diffChecker) interPod(p *v1.Pod, n *v1.Node) []string {
	var why []string
	sameDomain := func(key, node string) bool {
		v, ok := n.Labels[key]
		if !ok {
			return false
		}
		for _, m := range c.nodes {
			if m.Name == node {
				w, ok := m.Labels[key]
				return ok && w == v
			}
		}
		return false
	}
	var affinity, anti []v1.PodAffinityTerm
	if a := p.Spec.Affinity; a != nil && a.PodAffinity != nil {
		affinity = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		anti = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if len(affinity) > 0 {
		// A pod counts for the affinity when it matches every term; when
		// none does anywhere, a pod that matches its own terms may start
		// the group on any node that has the keys.
		matchesAll := func(q *v1.Pod) bool {
			return !slices.ContainsFunc(affinity, func(term v1.PodAffinityTerm) bool { return !termSelects(term, p, q) })
		}
		anyMatch, ok := false, true
		for _, term := range affinity {
			if _, has := n.Labels[term.TopologyKey]; !has {
				ok = false
				continue
			}
			found := false
			for node, qs := range c.pods {
				for _, q := range qs {
					if matchesAll(q) && sameDomain(term.TopologyKey, node) {
						found = true
					}
				}
			}
			if !found {
				ok = false
			}
		}
		for node, qs := range c.pods {
			for _, q := range qs {
				if matchesAll(q) && slices.ContainsFunc(c.nodes, func(m *v1.Node) bool {
					if m.Name != node {
						return false
					}
					return !slices.ContainsFunc(affinity, func(term v1.PodAffinityTerm) bool { _, has := m.Labels[term.TopologyKey]; return !has })
				}) {
					anyMatch = true
				}
			}
		}
		keys := !slices.ContainsFunc(affinity, func(term v1.PodAffinityTerm) bool { _, has := n.Labels[term.TopologyKey]; return !has })
		if !ok && !(keys && !anyMatch && matchesAll(p)) {
			why = append(why, "pod affinity")
		}
	}
	for _, term := range anti {
		for node, qs := range c.pods {
			for _, q := range qs {
				if termSelects(term, p, q) && sameDomain(term.TopologyKey, node) {
					why = append(why, "pod anti-affinity ("+q.Name+")")
				}
			}
		}
	}
	for node, qs := range c.pods {
		for _, q := range qs {
			if q.Spec.Affinity == nil || q.Spec.Affinity.PodAntiAffinity == nil {
				continue
			}
			for _, term := range q.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if termSelects(term, q, p) && sameDomain(term.TopologyKey, node) {
					why = append(why, "existing pod "+q.Name+"'s anti-affinity")
				}
			}
		}
	}
	return why
}
