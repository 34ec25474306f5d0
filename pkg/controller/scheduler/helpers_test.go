package scheduler

import (
	"fmt"
	"math/rand"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func node(name string, milliCPU int64, pods int64) *v1.Node {
	alloc := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse("64Gi"),
		v1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
}

type podOpt func(*v1.Pod)

func onNode(n string) podOpt      { return func(p *v1.Pod) { p.Spec.NodeName = n } }
func labelled(k, v string) podOpt { return func(p *v1.Pod) { p.Labels = map[string]string{k: v} } }
func started(minutes int) podOpt {
	return func(p *v1.Pod) {
		t := metav1.NewTime(epoch.Add(time.Duration(minutes) * time.Minute))
		p.Status.StartTime = &t
	}
}
func never() podOpt { return func(p *v1.Pod) { n := v1.PreemptNever; p.Spec.PreemptionPolicy = &n } }

func pod(name string, priority int32, milliCPU int64, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: &priority, SchedulerName: DefaultSchedulerName, Containers: []v1.Container{{Name: "c",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)}}}}}}
	t := metav1.NewTime(epoch)
	p.Status.StartTime = &t
	for _, o := range opts {
		o(p)
	}
	return p
}

func pdb(name string, allowed int32, matchLabel string, disrupted ...string) *policyv1.PodDisruptionBudget {
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": matchLabel}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, DisruptedPods: map[string]metav1.Time{}}}
	for _, d := range disrupted {
		b.Status.DisruptedPods[d] = metav1.NewTime(epoch)
	}
	return b
}

// world builds a cache with nodes and assigned pods.
func world(nodes []*v1.Node, pods ...*v1.Pod) *cache {
	c := newCache()
	for _, n := range nodes {
		c.setNode(n)
	}
	for _, p := range pods {
		c.setPod(p)
	}
	return c
}

func newTestPreemptor(c *cache, pdbs ...*policyv1.PodDisruptionBudget) *preemptor {
	return &preemptor{cfg: preemptionConfig{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100, Parallelism: 4},
		c: c, pdbs: pdbs, rand: rand.New(rand.NewSource(4)), now: time.Now()}
}

func query(p *v1.Pod) *podQuery {
	q, err := newPodQuery(newPodInfo(p))
	if err != nil {
		panic(err)
	}
	return q
}

// statusesOf filters p on every node of c, as the scheduling cycle does.
func statusesOf(c *cache, p *v1.Pod) map[string]status {
	q := query(p)
	out := map[string]status{}
	for name, n := range c.nodes {
		out[name] = c.filterWithNominated(q, n)
	}
	return out
}

func names(ps []*podInfo) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.pod.Name
	}
	return out
}

func nodes(n int, milliCPU int64, pods int64) []*v1.Node {
	out := make([]*v1.Node, n)
	for i := range out {
		out[i] = node(fmt.Sprintf("node%d", i+1), milliCPU, pods)
	}
	return out
}
