package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
)

var t0 = time.Date(2026, 11, 24, 18, 0, 0, 0, time.UTC)

func testNode(name string, milliCPU int64, taints ...v1.Taint) *v1.Node {
	alloc := v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: v1.NodeSpec{Taints: taints}, Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
}

func testPod(name, node string, priority int32, milliCPU int64) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: node, Priority: &priority, SchedulerName: "nodeshepherd-scheduler",
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)}}}}},
		Status: v1.PodStatus{Phase: v1.PodPending}}
}

func event(name, reason, msg string, involved *v1.Pod, first time.Time, count int32) *v1.Event {
	return &v1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: involved.Namespace},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: involved.Namespace, Name: involved.Name, UID: involved.UID},
		Reason:         reason, Message: msg, Type: v1.EventTypeWarning, Source: v1.EventSource{Component: "nodeshepherd-scheduler"},
		FirstTimestamp: metav1.NewTime(first), LastTimestamp: metav1.NewTime(first.Add(time.Duration(count-1) * time.Minute)), Count: count}
}

var unreachable = v1.Taint{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}

// cpuAndTaints is 5 nodes: 2 full of more important pods, 3 unreachable.
func cpuAndTaints(pending *v1.Pod) []runtime.Object {
	return []runtime.Object{
		testNode("a-full", 1000), testNode("b-full", 1000),
		testNode("c-gone", 4000, unreachable), testNode("d-gone", 4000, unreachable), testNode("e-gone", 4000, unreachable),
		testPod("big-a", "a-full", 1000, 800), testPod("big-b", "b-full", 1000, 800),
		pending,
	}
}

func TestPodSummarisesLikeKubeScheduler(t *testing.T) {
	pending := testPod("web", "", 100, 500)
	cs := fake.NewClientset(cpuAndTaints(pending)...)
	e, err := Pod(context.Background(), cs, "default", "web", scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). " +
		"preemption: 0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
	if !e.Pending || e.Summary != want {
		t.Errorf("pending %v summary\n  %q\nwant\n  %q", e.Pending, e.Summary, want)
	}
	var names []string
	for _, n := range e.Nodes {
		names = append(names, fmt.Sprintf("%s:%v:%v", n.Node, n.Fits, n.PreemptionMayHelp))
	}
	if got := strings.Join(names, " "); got != "a-full:false:true b-full:false:true c-gone:false:false d-gone:false:false e-gone:false:false" {
		t.Errorf("nodes %s", got)
	}
	if e.Preemption != nil {
		t.Errorf("no victim has a lower priority, yet preemption %+v", e.Preemption)
	}
	for _, a := range cs.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" {
			t.Errorf("explain made a %s request on %s", v, a.GetResource().Resource)
		}
	}
	var table bytes.Buffer
	if err := Write(&table, "table", e); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Status:", "Pending: not bound to a node", "Evaluated now:", want, "NODE", "a-full", "Insufficient cpu (preemption may help)",
		"node(s) had untolerated taint(s)", "Nominated node:", "<none>"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

func TestPodPreemptionDryRunAndVictims(t *testing.T) {
	pending := testPod("web", "", 100, 500)
	pending.Status.NominatedNodeName = "a-full"
	// b-full: a more important pod and a less important one of 400m each;
	// without the second the pending pod fits.
	objs := []runtime.Object{testNode("a-full", 1000), testNode("b-full", 1000), testNode("c-gone", 4000, unreachable),
		testPod("big-a", "a-full", 1000, 800), testPod("mid", "b-full", 1000, 400), testPod("low", "b-full", 10, 400), pending}
	victim := testPod("old", "b-full", 10, 100)
	preempted := event("old.1", "Preempted", "Preempted by pod uid-web on node b-full", victim, t0, 1)
	preempted.Type = v1.EventTypeNormal
	other := event("x.1", "Preempted", "Preempted by pod uid-someone on node a-full", victim, t0, 1)
	objs = append(objs, preempted, other)
	cs := fake.NewClientset(objs...)
	e, err := Pod(context.Background(), cs, "default", "web", scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if e.NominatedNodeName != "a-full" {
		t.Errorf("nominated %q", e.NominatedNodeName)
	}
	if e.Preemption == nil || e.Preemption.Node != "b-full" || len(e.Preemption.Victims) != 1 || e.Preemption.Victims[0].Name != "low" {
		t.Errorf("preemption %+v, want b-full [low]", e.Preemption)
	}
	if len(e.Victims) != 1 || e.Victims[0].Name != "old" || e.Victims[0].Node != "b-full" {
		t.Errorf("victims %+v, want old on b-full", e.Victims)
	}
	var out bytes.Buffer
	if err := Write(&out, "json", e); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["nominatedNodeName"] != "a-full" || back["preemption"] == nil || back["victims"] == nil {
		t.Errorf("json lacks fields: %s", out.String())
	}
	out.Reset()
	if err := Write(&out, "table", e); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Preemption now:", "would preempt on node b-full: default/low (priority 10)", "Preemption attempts:", "preempted default/old"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

func TestPodEventsMergedAndOrdered(t *testing.T) {
	pod := testPod("web", "", 0, 100)
	older := pod.DeepCopy()
	older.UID = "uid-earlier-web"
	msg := "0/3 nodes are available: 3 Insufficient cpu."
	evs := []v1.Event{
		*event("e3", "Scheduled", "Successfully assigned default/web to n1", pod, t0.Add(10*time.Minute), 1),
		*event("e1", "FailedScheduling", msg, pod, t0, 3),
		*event("e2", "FailedScheduling", msg, pod, t0.Add(5*time.Minute), 2),
		*event("e4", "FailedScheduling", "0/3 nodes are available: 3 node(s) had untolerated taint(s).", pod, t0.Add(time.Minute), 1),
		*event("e5", "FailedScheduling", msg, older, t0.Add(-time.Hour), 9),
		*event("e6", "Pulled", "Container image pulled", pod, t0, 1),
	}
	evs[0].Type = v1.EventTypeNormal
	evs[5].Source.Component = "kubelet"
	got := podEvents(pod, evs)
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%s x%d %s..%s", e.Reason, e.Count, e.FirstSeen.Format("15:04"), e.LastSeen.Format("15:04")))
	}
	want := []string{"FailedScheduling x5 18:00..18:06", "FailedScheduling x1 18:01..18:01", "Scheduled x1 18:10..18:10"}
	if strings.Join(lines, "; ") != strings.Join(want, "; ") {
		t.Errorf("events\n  %v\nwant\n  %v", lines, want)
	}
	if got[1].Message != "0/3 nodes are available: 3 node(s) had untolerated taint(s)." {
		t.Errorf("second event %q", got[1].Message)
	}
}

func TestPodSeriesEvents(t *testing.T) {
	pod := testPod("web", "", 0, 100)
	ev := v1.Event{InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: pod.UID},
		Reason: "FailedScheduling", ReportingController: "default-scheduler", Message: "m", Type: v1.EventTypeWarning,
		EventTime: metav1.NewMicroTime(t0), Series: &v1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(t0.Add(time.Hour))}}
	got := podEvents(pod, []v1.Event{ev})
	if len(got) != 1 || got[0].Count != 4 || !got[0].FirstSeen.Equal(&metav1.Time{Time: t0}) || got[0].LastSeen.Sub(t0) != time.Hour || got[0].From != "default-scheduler" {
		t.Errorf("series event %+v", got)
	}
}

func TestPodNotPendingAndNotFound(t *testing.T) {
	bound := testPod("web", "n1", 0, 100)
	bound.Status.Phase = v1.PodRunning
	cs := fake.NewClientset(testNode("n1", 1000), bound, event("s", "Scheduled", "Successfully assigned default/web to n1", bound, t0, 1))
	e, err := Pod(context.Background(), cs, "default", "web", scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if e.Pending || e.NodeName != "n1" || len(e.Nodes) != 0 || len(e.Events) != 1 {
		t.Errorf("bound pod explained as %+v", e)
	}
	var out bytes.Buffer
	if err := Write(&out, "yaml", e); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nodeName: n1") || !strings.Contains(out.String(), "pending: false") {
		t.Errorf("yaml:\n%s", out.String())
	}
	out.Reset()
	if err := e.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Scheduled: bound to node n1, phase Running") || strings.Contains(out.String(), "Nodes:") {
		t.Errorf("table:\n%s", out.String())
	}

	_, err = Pod(context.Background(), cs, "default", "nope", scheduler.DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), `pod "nope" not found in namespace "default"`) {
		t.Errorf("missing pod: %v", err)
	}
}

func TestPreemptionAttemptsFromEventsAndVictims(t *testing.T) {
	pod := testPod("web", "", 100, 100)
	evs := []v1.Event{
		*event("e1", "FailedScheduling", "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.", pod, t0, 4),
		*event("e2", "FailedScheduling", "0/2 nodes are available: 2 Insufficient cpu.", pod, t0.Add(10*time.Minute), 1),
		*event("e3", "FailedScheduling", "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating pod on the nominated node.", pod, t0.Add(11*time.Minute), 2),
	}
	victim := testPod("low", "n2", 10, 100)
	preempted := *event("v1", "Preempted", "Preempted by pod uid-web on node n2", victim, t0.Add(10*time.Minute), 1)
	// events.k8s.io: the preemptor is the related object.
	related := *event("v2", "Preempted", "Preempted by pod uid-web on node n2", testPod("low2", "n2", 10, 100), t0.Add(10*time.Minute), 1)
	related.Related = &v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: pod.UID}
	related.Message = "evicted"
	got := attempts(podEvents(pod, evs), victimsOf(pod, []v1.Event{preempted, related}))
	var lines []string
	for _, a := range got {
		lines = append(lines, fmt.Sprintf("%s x%d %s %s", a.FirstSeen.Format("15:04"), a.Count, orNone(a.Node), a.Outcome))
	}
	want := []string{
		"18:00 x4 <none> 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
		"18:10 x1 n2 preempted default/low",
		"18:10 x1 <none> preempted default/low2",
		"18:11 x2 <none> not eligible due to a terminating pod on the nominated node.",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("attempts\n  %s\nwant\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestPodBeingDeletedIsNoted(t *testing.T) {
	p := testPod("web", "", 0, 100)
	now := metav1.NewTime(t0)
	p.DeletionTimestamp = &now
	e := describePod(p)
	var out bytes.Buffer
	if err := e.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Note: the pod is being deleted (since 2026-11-24T18:00:00Z)") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestPodJudgedWithTheSchedulersFitSettings: explain judges with the
// settings it is given, as the scheduler that runs with them: an extended
// resource the scheduler ignores (flag, or the KubeSchedulerConfiguration
// profile of the pod's scheduler) keeps no node off; with the defaults it
// does. A file without a profile for the pod's scheduler is a usage error.
func TestPodJudgedWithTheSchedulersFitSettings(t *testing.T) {
	pending := testPod("web", "", 100, 100)
	pending.Spec.Containers[0].Resources.Requests["example.com/dongle"] = resource.MustParse("1")
	objs := []runtime.Object{testNode("a", 4000), testNode("b", 4000), pending}
	profile := func(name string) string {
		f := filepath.Join(t.TempDir(), "sched.yaml")
		doc := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: " + name +
			"\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      ignoredResources: [example.com/dongle]\n"
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	byFlag := scheduler.DefaultConfig()
	byFlag.FitIgnoredResources = "example.com/dongle"
	byGroup := scheduler.DefaultConfig()
	byGroup.FitIgnoredResourceGroups = "example.com"
	byFile := scheduler.DefaultConfig()
	byFile.KubeSchedulerConfig = profile("nodeshepherd-scheduler")
	for _, tc := range []struct {
		name string
		cfg  scheduler.Config
		fits bool
	}{
		{"defaults", scheduler.DefaultConfig(), false},
		{"--node-resources-fit-ignored-resources", byFlag, true},
		{"--node-resources-fit-ignored-resource-groups", byGroup, true},
		{"--kube-scheduler-config, the pod's scheduler's profile", byFile, true},
	} {
		e, err := Pod(context.Background(), fake.NewClientset(objs...), "default", "web", tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fits := 0
		for _, n := range e.Nodes {
			if n.Fits {
				fits++
			}
		}
		if tc.fits && (fits != 2 || e.Summary != "") {
			t.Errorf("%s: %d nodes fit, summary %q; want both, no summary", tc.name, fits, e.Summary)
		}
		if !tc.fits && (fits != 0 || !strings.Contains(e.Summary, "2 Insufficient example.com/dongle")) {
			t.Errorf("%s: %d nodes fit, summary %q; want none, Insufficient example.com/dongle", tc.name, fits, e.Summary)
		}
	}
	other := scheduler.DefaultConfig()
	other.KubeSchedulerConfig = profile("default-scheduler")
	_, err := Pod(context.Background(), fake.NewClientset(objs...), "default", "web", other)
	var usage *cli.UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "none has schedulerName nodeshepherd-scheduler") {
		t.Errorf("a file without the pod's scheduler's profile: %v, want a usage error naming it", err)
	}
}
