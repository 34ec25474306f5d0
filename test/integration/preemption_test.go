package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Priority classes every preemption situation has.
var priorityClasses = map[string]int32{"p10": 10, "p20": 20, "p50": 50, "p100": 100, "p1000": 1000}

// spec is a pod of a situation. Node is a 1-based node index for pods
// placed directly (spec.nodeName), 0 for pods left to the scheduler.
type spec struct {
	name     string
	node     int
	class    string
	milliCPU int64
	app      string
	hostPort int32
	never    bool
	onlyNode int // required node (nodeSelector on the hostname)
}

// situation is a cluster of 1-CPU fake nodes filled with pods, and one pod
// that needs preemption. wantNode 0 means it must stay pending.
type situation struct {
	name        string
	nodes       int
	taintNode   int // 1-based; NoSchedule taint the preemptor does not tolerate
	pods        []spec
	guarded     []string // apps protected by a PDB that allows no disruption
	preemptor   spec
	wantNode    int
	wantVictims []string
	wantMsg     string
}

// outcome is what a scheduler did with a situation's preemptor.
type outcome struct {
	node    int
	victims []string
	msg     string
}

func (o outcome) String() string { return fmt.Sprintf("node%d victims %v", o.node, o.victims) }

// situations are built from the reference's cases (preemption.md §14): each
// has one deterministic answer.
var situations = []situation{
	{name: "lowest highest-victim priority", nodes: 2,
		pods:      []spec{{name: "a", node: 1, class: "p10", milliCPU: 600}, {name: "b", node: 2, class: "p20", milliCPU: 600}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 500}, wantNode: 1, wantVictims: []string{"a"}},
	{name: "reprieve keeps the pod that can stay", nodes: 2,
		pods: []spec{{name: "big", node: 1, class: "p10", milliCPU: 700}, {name: "small", node: 1, class: "p10", milliCPU: 200},
			{name: "x", node: 2, class: "p50", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 600}, wantNode: 1, wantVictims: []string{"big"}},
	{name: "PDB-protected pods are spared when another node needs no violation", nodes: 2,
		pods:    []spec{{name: "a", node: 1, class: "p10", milliCPU: 900, app: "guarded"}, {name: "b", node: 2, class: "p20", milliCPU: 900, app: "free"}},
		guarded: []string{"guarded"}, preemptor: spec{name: "hi", class: "p1000", milliCPU: 500}, wantNode: 2, wantVictims: []string{"b"}},
	{name: "equal PDB violations fall back to priority", nodes: 2,
		pods: []spec{{name: "a", node: 1, class: "p10", milliCPU: 900, app: "guarded"}, {name: "b", node: 2, class: "p20", milliCPU: 900, app: "guarded"},
			{name: "c", node: 1, class: "p1000", milliCPU: 50, app: "guarded"}, {name: "d", node: 2, class: "p1000", milliCPU: 50, app: "guarded"}},
		guarded: []string{"guarded"}, preemptor: spec{name: "hi", class: "p1000", milliCPU: 500}, wantNode: 1, wantVictims: []string{"a"}},
	{name: "lowest priority sum", nodes: 2,
		pods: []spec{{name: "a", node: 1, class: "p20", milliCPU: 500}, {name: "b", node: 1, class: "p10", milliCPU: 500},
			{name: "c", node: 2, class: "p20", milliCPU: 500}, {name: "d", node: 2, class: "p20", milliCPU: 500}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 1000}, wantNode: 1, wantVictims: []string{"a", "b"}},
	{name: "fewest victims", nodes: 2,
		pods: []spec{{name: "a", node: 1, class: "p10", milliCPU: 300}, {name: "b", node: 1, class: "p10", milliCPU: 300}, {name: "c", node: 1, class: "p10", milliCPU: 300},
			{name: "d", node: 2, class: "p10", milliCPU: 450}, {name: "e", node: 2, class: "p10", milliCPU: 450}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 950}, wantNode: 2, wantVictims: []string{"d", "e"}},
	{name: "mixed priorities: lower ones go, the needed minimum only", nodes: 2,
		pods: []spec{{name: "a", node: 1, class: "p10", milliCPU: 300}, {name: "b", node: 1, class: "p20", milliCPU: 300}, {name: "c", node: 1, class: "p50", milliCPU: 300},
			{name: "x", node: 2, class: "p50", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 600}, wantNode: 1, wantVictims: []string{"a", "b"}},
	{name: "untolerated taint makes a node unresolvable", nodes: 2, taintNode: 1,
		pods:      []spec{{name: "a", node: 1, class: "p10", milliCPU: 900}, {name: "b", node: 2, class: "p50", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 500}, wantNode: 2, wantVictims: []string{"b"}},
	{name: "node selector limits the candidates", nodes: 2,
		pods:      []spec{{name: "a", node: 1, class: "p10", milliCPU: 900}, {name: "b", node: 2, class: "p50", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 500, onlyNode: 2}, wantNode: 2, wantVictims: []string{"b"}},
	{name: "host port conflict is resolved by preemption", nodes: 2,
		pods:      []spec{{name: "a", node: 1, class: "p10", milliCPU: 100, hostPort: 8080}, {name: "b", node: 2, class: "p20", milliCPU: 100, hostPort: 8080}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 100, hostPort: 8080}, wantNode: 1, wantVictims: []string{"a"}},
	{name: "preemptionPolicy Never never preempts", nodes: 2,
		pods:      []spec{{name: "a", node: 1, class: "p10", milliCPU: 900}, {name: "b", node: 2, class: "p10", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 500, never: true}, wantMsg: "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."},
	{name: "equal priority is never a victim", nodes: 2,
		pods:      []spec{{name: "a", node: 1, class: "p1000", milliCPU: 900}, {name: "b", node: 2, class: "p1000", milliCPU: 900}},
		preemptor: spec{name: "hi", class: "p1000", milliCPU: 500},
		wantMsg:   "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."},
}

func createPriorityClasses(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	never := v1.PreemptNever
	classes := []*schedulingv1.PriorityClass{{ObjectMeta: metav1.ObjectMeta{Name: "p1000-never"}, Value: 1000, PreemptionPolicy: &never},
		{ObjectMeta: metav1.ObjectMeta{Name: "p100-never"}, Value: 100, PreemptionPolicy: &never}}
	for name, value := range priorityClasses {
		classes = append(classes, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value})
	}
	for _, pc := range classes {
		if _, err := client.SchedulingV1().PriorityClasses().Create(framework.Context(t), pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func (s spec) pod(nodes []string, schedulerName string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"},
		Spec: v1.PodSpec{SchedulerName: schedulerName, PriorityClassName: s.class, TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(s.milliCPU, resource.DecimalSI)}}}}}}
	if s.app != "" {
		p.Labels = map[string]string{"app": s.app}
	}
	if s.node > 0 {
		p.Spec.NodeName = nodes[s.node-1]
	}
	if s.onlyNode > 0 {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodes[s.onlyNode-1]}
	}
	if s.hostPort > 0 {
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: s.hostPort, HostPort: s.hostPort}}
	}
	if s.never {
		// The priority admission plugin copies the class's policy.
		p.Spec.PriorityClassName = s.class + "-never"
	}
	return p
}

// preemptionCluster is a fresh control plane with kube-controller-manager
// (its disruption controller computes PDB status), fake 1-CPU nodes and
// nodeshepherd's node lifecycle controller (which lifts the not-ready
// taints). With upstream, kube-scheduler schedules; otherwise nodeshepherd's
// scheduler does, under the name default-scheduler, so that the pods are
// identical in both runs.
type preemptionCluster struct {
	client kubernetes.Interface
	cfg    *rest.Config
	nodes  []string
	ns     *framework.NodeShepherd
}

// controlPlaneStarts lets one parallel situation start its control plane at
// a time: the control plane picks free ports by binding port 0 and closing
// them before its components bind them, so two starts at once can take each
// other's ports. Only the start-up is serialized; the situations run together.
var controlPlaneStarts sync.Mutex

func startControlPlaneAlone(t *testing.T, cfg controlplane.Config) *controlplane.ControlPlane {
	t.Helper()
	controlPlaneStarts.Lock()
	defer controlPlaneStarts.Unlock()
	return framework.StartControlPlane(t, cfg)
}

// preemptionNodeCPU is every fake node's CPU in the preemption situations.
const preemptionNodeCPU = "1"

func startPreemptionCluster(t *testing.T, nodes int, upstream bool, mut func(*scheduler.Config)) *preemptionCluster {
	t.Helper()
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true, Scheduler: upstream})
	client := framework.Client(t, cp)
	fn := fastNodes(client, nodes, false)
	fn.CPU = resource.MustParse(preemptionNodeCPU)
	m := framework.StartFakeNodes(t, fn)
	ctrl := fastLifecycle(100)
	ctrl.Scheduler.SchedulerName = v1.DefaultSchedulerName
	ctrl.Scheduler.PodInitialBackoff = 100 * time.Millisecond
	ctrl.Scheduler.PodMaxBackoff = time.Second
	if mut != nil {
		mut(&ctrl.Scheduler)
	}
	names := []string{"nodelifecycle"}
	if !upstream {
		names = append(names, scheduler.Name)
	}
	ns := framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = names })
	waitNodesReady(t, client, m.NodeNames()...)
	createPriorityClasses(t, client)
	return &preemptionCluster{client: client, cfg: cp.RESTConfig(), nodes: m.NodeNames(), ns: ns}
}

func (c *preemptionCluster) create(t *testing.T, p *v1.Pod) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "pod "+p.Name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := c.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
	})
}

// guard protects every pod of app: minAvailable is their count (a number,
// so that the disruption controller needs no owner to compute it).
func (c *preemptionCluster) guard(t *testing.T, app string, pods int) {
	t.Helper()
	all := intstr.FromInt32(int32(pods))
	createPDB(t, c.client, app, &all, nil)
}

// setUp creates the situation's pods (Running) and PDBs.
func (c *preemptionCluster) setUp(t *testing.T, s situation) {
	t.Helper()
	if s.taintNode > 0 {
		patch := `{"spec":{"taints":[{"key":"dedicated","value":"other","effect":"NoSchedule"}]}}`
		if _, err := c.client.CoreV1().Nodes().Patch(framework.Context(t), c.nodes[s.taintNode-1], "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range s.pods {
		c.create(t, p.pod(c.nodes, v1.DefaultSchedulerName))
	}
	framework.Eventually(t, 60*time.Second, "situation pods running", func(ctx context.Context) (bool, string, error) {
		l, err := c.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range l.Items {
			if p.Status.Phase == v1.PodRunning {
				running++
			}
		}
		return running == len(s.pods), fmt.Sprintf("%d of %d running", running, len(s.pods)), nil
	})
	for _, app := range s.guarded {
		n := 0
		for _, p := range s.pods {
			if p.app == app {
				n++
			}
		}
		c.guard(t, app, n)
	}
}

// run creates the preemptor and waits for its fate: bound, or a failure
// message that says what preemption decided.
func (c *preemptionCluster) run(t *testing.T, s situation) outcome {
	t.Helper()
	c.create(t, s.preemptor.pod(c.nodes, v1.DefaultSchedulerName))
	var out outcome
	framework.Eventually(t, 90*time.Second, "preemptor "+s.preemptor.name+" decided", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, s.preemptor.name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Spec.NodeName != "" {
			out.node = slices.Index(c.nodes, p.Spec.NodeName) + 1
			return true, "", nil
		}
		if cond := kube.PodCondition(p, v1.PodScheduled); cond != nil && s.wantNode == 0 && strings.Contains(cond.Message, "preemption:") {
			out.msg = cond.Message
			return true, "", nil
		}
		return false, fmt.Sprintf("nominated %q, conditions %+v", p.Status.NominatedNodeName, p.Status.Conditions), nil
	})
	l, err := c.client.CoreV1().Pods("default").List(framework.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alive := map[string]bool{}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			alive[p.Name] = true
		}
	}
	for _, p := range s.pods {
		if !alive[p.name] {
			out.victims = append(out.victims, p.name)
		}
	}
	slices.Sort(out.victims)
	return out
}

func runSituation(t *testing.T, s situation, upstream bool) outcome {
	c := startPreemptionCluster(t, s.nodes, upstream, nil)
	c.setUp(t, s)
	return c.run(t, s)
}

func (s situation) check(t *testing.T, who string, got outcome) {
	t.Helper()
	want := outcome{node: s.wantNode, victims: slices.Sorted(slices.Values(s.wantVictims))}
	if got.node != want.node || !slices.Equal(got.victims, want.victims) {
		t.Errorf("%s: %s, want %s", who, got, want)
	}
	if s.wantMsg != "" && got.msg != s.wantMsg {
		t.Errorf("%s: message %q, want %q", who, got.msg, s.wantMsg)
	}
}

// TestPreemptionSameAsKubeScheduler runs every situation with
// nodeshepherd's scheduler on a fresh control plane and requires the node,
// the victims and (where the preemptor stays pending) the message that
// kube-scheduler chose in the same situation. kube-scheduler's decisions are
// recorded in testdata/preemption-kube-scheduler.json by `make
// golden-preemption` (this test with -update-preemption-golden, which runs
// kube-scheduler on a fresh control plane per situation); the file names the
// hash of the situations' pods and nodes and the kube-scheduler version, so a
// changed situation or a new control plane fails here until it is refreshed.
func TestPreemptionSameAsKubeScheduler(t *testing.T) {
	var golden *preemptionGolden
	if *updatePreemptionGolden {
		golden = recordKubeScheduler(t)
	} else {
		golden = loadPreemptionGolden(t)
	}
	for _, s := range situations {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			upstream := golden.outcome(s.name)
			s.check(t, "kube-scheduler (recorded)", upstream)
			ours := runSituation(t, s, false)
			t.Logf("kube-scheduler: %s %q; nodeshepherd: %s %q", upstream, upstream.msg, ours, ours.msg)
			if upstream.node != ours.node || !slices.Equal(upstream.victims, ours.victims) || upstream.msg != ours.msg {
				t.Errorf("decisions differ:\n kube-scheduler: %s %q\n nodeshepherd:   %s %q", upstream, upstream.msg, ours, ours.msg)
			}
			s.check(t, "nodeshepherd", ours)
		})
	}
}
