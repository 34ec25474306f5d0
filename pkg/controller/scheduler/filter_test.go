package scheduler

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestFilters(t *testing.T) {
	base := func() *v1.Node { return node("n", 1000, 2) }
	tests := []struct {
		name string
		node func(*v1.Node)
		pod  func(*v1.Pod)
		on   []*v1.Pod
		want status
	}{
		{"fits", nil, nil, nil, status{}},
		{"cordoned", func(n *v1.Node) { n.Spec.Unschedulable = true }, nil, nil, reject(unresolvable, reasonUnschedulable)},
		{"cordoned but tolerated", func(n *v1.Node) { n.Spec.Unschedulable = true },
			func(p *v1.Pod) {
				p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
			}, nil, status{}},
		{"other nodeName", nil, func(p *v1.Pod) { p.Spec.NodeName = "elsewhere" }, nil, reject(unresolvable, reasonNodeName)},
		{"NoExecute taint", func(n *v1.Node) { n.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}} }, nil, nil, reject(unresolvable, reasonTaint)},
		{"PreferNoSchedule is only a score", func(n *v1.Node) { n.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectPreferNoSchedule}} }, nil, nil, status{}},
		{"nodeSelector", nil, func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }, nil, reject(unresolvable, reasonAffinity)},
		{"required affinity", nil, func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{"n"}}}}}}}}
		}, nil, status{}},
		{"host port taken", nil, func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{HostPort: 80, ContainerPort: 80}} },
			[]*v1.Pod{func() *v1.Pod {
				p := pod("web", 0, 0, onNode("n"))
				p.Spec.Containers[0].Ports = []v1.ContainerPort{{HostPort: 80, HostIP: "10.0.0.1", ContainerPort: 80}}
				return p
			}()}, reject(unschedulable, reasonPorts)},
		{"too many pods", nil, nil, []*v1.Pod{pod("a", 0, 0, onNode("n")), pod("b", 0, 0, onNode("n"))}, reject(unschedulable, reasonTooManyPods)},
		{"insufficient cpu", nil, func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("600m") },
			[]*v1.Pod{pod("a", 0, 500, onNode("n"))}, reject(unschedulable, "Insufficient cpu")},
		{"bigger than the node", nil, func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("2") },
			nil, reject(unresolvable, "Insufficient cpu")},
		{"unknown extended resource", nil, func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1") },
			nil, reject(unresolvable, "Insufficient example.com/gpu")},
		{"init container counts as its max", nil, func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("700m")}}}}
		}, []*v1.Pod{pod("a", 0, 500, onNode("n"))}, reject(unschedulable, "Insufficient cpu")},
		{"overhead counts", nil, func(p *v1.Pod) { p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("450m")} },
			[]*v1.Pod{pod("a", 0, 500, onNode("n"))}, reject(unschedulable, "Insufficient cpu")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := base()
			if tc.node != nil {
				tc.node(n)
			}
			p := pod("p", 0, 100)
			if tc.pod != nil {
				tc.pod(p)
			}
			c := world([]*v1.Node{n}, tc.on...)
			got := filter(query(p), c.nodes["n"])
			if got.code != tc.want.code || len(got.reasons) != len(tc.want.reasons) || (len(got.reasons) > 0 && got.reasons[0] != tc.want.reasons[0]) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestInvalidAffinityIsAnError(t *testing.T) {
	p := pod("p", 0, 100)
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "k", Operator: v1.NodeSelectorOpGt, Values: []string{"many"}}}}}}}}
	if _, err := newPodQuery(newPodInfo(p)); err == nil {
		t.Error("want an error for a Gt value that is not an integer")
	}
}

func TestFitErrorMessage(t *testing.T) {
	st := map[string]status{
		"a": reject(unschedulable, "Insufficient cpu"), "b": reject(unschedulable, "Insufficient cpu", "Insufficient memory"),
		"c": reject(unresolvable, reasonTaint),
	}
	want := "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
	if got := fitError(3, st, ""); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestScoresPreferEmptierNodesAndAffinity(t *testing.T) {
	empty, busy := node("empty", 4000, 10), node("busy", 4000, 10)
	c := world([]*v1.Node{empty, busy}, pod("x", 0, 3000, onNode("busy")))
	sc := newScorer(newPodInfo(pod("p", 0, 500)))
	s := total([]rawScore{sc.raw(c.nodes["empty"]), sc.raw(c.nodes["busy"])})
	if s[0] <= s[1] {
		t.Errorf("least-allocated: empty %d, busy %d", s[0], s[1])
	}
	tainted := node("tainted", 4000, 10)
	tainted.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectPreferNoSchedule}}
	c = world([]*v1.Node{empty, tainted})
	s = total([]rawScore{sc.raw(c.nodes["empty"]), sc.raw(c.nodes["tainted"])})
	if s[0] <= s[1] {
		t.Errorf("PreferNoSchedule: untainted %d, tainted %d", s[0], s[1])
	}
}

// namedNodes narrows the nodes as kube-scheduler's NodeAffinity PreFilter
// does: only when every term names nodes by matchFields metadata.name In.
func TestNamedNodes(t *testing.T) {
	names := func(vals ...string) v1.NodeSelectorRequirement {
		return v1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: vals}
	}
	label := v1.NodeSelectorRequirement{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{"a"}}
	for _, tc := range []struct {
		name  string
		terms []v1.NodeSelectorTerm
		want  []string // nil: any node
	}{
		{"no affinity", nil, nil},
		{"one name (a DaemonSet's pod)", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{names("n1")}}}, []string{"n1"}},
		{"names ORed across terms", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{names("n1")}}, {MatchFields: []v1.NodeSelectorRequirement{names("n2", "n3")}}}, []string{"n1", "n2", "n3"}},
		{"names ANDed in a term", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{names("n1", "n2"), names("n2", "n3")}}}, []string{"n2"}},
		{"a term without names: any node", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{names("n1")}}, {MatchExpressions: []v1.NodeSelectorRequirement{label}}}, nil},
		{"NotIn narrows nothing", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpNotIn, Values: []string{"n1"}}}}}, nil},
		{"no name in common", []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{names("n1"), names("n2")}}}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{}
			if tc.terms != nil {
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: tc.terms}}}
			}
			got := namedNodes(p)
			if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(sets.New(tc.want...)) {
				t.Errorf("namedNodes = %v, want %v", got, tc.want)
			}
		})
	}
}
