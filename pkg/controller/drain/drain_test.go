package drain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
)

func pod(mut func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptr.To(true)}}}}
	if mut != nil {
		mut(p)
	}
	return p
}

func owned(kind string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.OwnerReferences[0].Kind = kind }
}

func TestSkipReason(t *testing.T) {
	def := DefaultConfig()
	def.ProtectedPodAnnotations = []string{"team/keep", "tier=db"}
	all := def
	all.EvictDaemonSetPods, all.EvictStatefulSetPods, all.EvictLocalStoragePods, all.EvictUnreplicatedPods = true, true, true, true
	cases := []struct {
		name      string
		pod       *v1.Pod
		def, flag string // expected reason prefix with defaults / with every --evict-* flag ("" = evict)
	}{
		{"replicaset pod", pod(nil), "", ""},
		{"mirror pod", pod(func(p *v1.Pod) { p.Annotations = map[string]string{mirrorPodAnnotation: "x"} }), "mirror", "mirror"},
		{"safe-to-evict=false", pod(func(p *v1.Pod) { p.Annotations = map[string]string{SafeToEvictAnnotation: "false"} }), "annotated", "annotated"},
		{"safe-to-evict=true", pod(func(p *v1.Pod) { p.Annotations = map[string]string{SafeToEvictAnnotation: "true"} }), "", ""},
		{"protected key", pod(func(p *v1.Pod) { p.Annotations = map[string]string{"team/keep": ""} }), "protected", "protected"},
		{"protected key=value", pod(func(p *v1.Pod) { p.Annotations = map[string]string{"tier": "db"} }), "protected", "protected"},
		{"other value", pod(func(p *v1.Pod) { p.Annotations = map[string]string{"tier": "web"} }), "", ""},
		{"daemonset", pod(owned("DaemonSet")), "DaemonSet", ""},
		{"statefulset", pod(owned("StatefulSet")), "StatefulSet", ""},
		{"no controller", pod(func(p *v1.Pod) { p.OwnerReferences = nil }), "no controller", ""},
		{"emptyDir", pod(func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		}), "local storage in volume scratch", ""},
		{"hostPath", pod(func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}}}
		}), "local storage", ""},
		{"finished", pod(func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded; p.OwnerReferences = nil }), "finished", "finished"},
	}
	for _, tc := range cases {
		for _, x := range []struct {
			cfg  Config
			want string
		}{{def, tc.def}, {all, tc.flag}} {
			got := x.cfg.skipReason(tc.pod)
			if (x.want == "") != (got == "") || !strings.HasPrefix(got, x.want) {
				t.Errorf("%s: skipReason = %q, want prefix %q", tc.name, got, x.want)
			}
		}
	}
}

func TestGracePeriod(t *testing.T) {
	c := DefaultConfig()
	if g := c.gracePeriod(pod(func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30) })); g != 30 {
		t.Errorf("pod's 30s under the 8m cap: got %d", g)
	}
	if g := c.gracePeriod(pod(func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3600) })); g != 480 {
		t.Errorf("pod's 1h capped at 8m: got %d", g)
	}
}

func TestStateRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	n := &v1.Node{}
	if s := readState(n); s.owned || s.phase != phaseNone {
		t.Fatalf("fresh node: %+v", s)
	}
	cordon(n, ruleHolders([]rules.Condition{{Type: "KernelDeadlock", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute}}), t0.Add(-time.Second), "")
	if got := n.Annotations[AnnotationConditions]; got != "KernelDeadlock=True,10m0s" {
		t.Errorf("annotation %q (Draino's Type=Status,duration)", got)
	}
	if s := readState(n); !s.cordonedAt.Equal(t0.Add(-time.Second)) {
		t.Errorf("cordoned at %v", s.cordonedAt)
	}
	setDrainCondition(n, v1.ConditionTrue, scheduledMessage(t0), t0)
	s := readState(n)
	if !s.owned || !s.cordoned || s.phase != phaseInFlight || !s.scheduledAt.Equal(t0) {
		t.Fatalf("scheduled: %+v", s)
	}
	if c := n.Status.Conditions[0]; c.Reason != "Draino" || c.Message != "Drain activity scheduled 2026-11-21T10:00:00.000000000Z" {
		t.Errorf("condition %+v is not Draino's (with sub-second precision)", c)
	}
	t1 := t0.Add(time.Minute + 350*time.Millisecond)
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(t0, false, t1, "Blocked: default/web-1 (PodDisruptionBudget web refuses)"), t1)
	setAnnotation(n, AnnotationAttempts, "3")
	s = readState(n)
	if s.phase != phaseFailed || !s.finishedAt.Equal(t1) || !s.scheduledAt.Equal(t0) || s.attempts != 3 {
		t.Fatalf("failed: %+v", s)
	}
	if want := "Drain activity scheduled 2026-11-21T10:00:00.000000000Z | Failed: 2026-11-21T10:01:00.350000000Z | Blocked: default/web-1 (PodDisruptionBudget web refuses)"; n.Status.Conditions[0].Message != want {
		t.Errorf("message %q, want %q", n.Status.Conditions[0].Message, want)
	}
	// Backoff doubles: 2m, 4m, 8m for the third failure.
	if got := s.retryAt(2 * time.Minute); !got.Equal(t1.Add(8 * time.Minute)) {
		t.Errorf("retry at %v, want %v", got, t1.Add(8*time.Minute))
	}
	s.attempts = 30
	if got := s.retryAt(2 * time.Minute); !got.Equal(t1.Add(MaxRetryBackoff)) {
		t.Errorf("retry capped at 1h: %v", got)
	}
	setAnnotation(n, AnnotationRetry, "true")
	if s := readState(n); !s.retryAt(time.Hour).Equal(t1) {
		t.Errorf("draino/drain-retry=true retries at once")
	}
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(t0, true, t1, ""), t1)
	if readState(n).phase != phaseCompleted {
		t.Errorf("completed not read back")
	}
	release(n, true)
	removeDrainCondition(n)
	if s := readState(n); s.owned || s.cordoned || s.phase != phaseNone || s.attempts != 0 {
		t.Errorf("released: %+v", s)
	}
}

// Times written at one-second precision (Draino, older nodeshepherd) are
// rounded up: the true time lies in [t, t+1s), and no buffer or deadline
// measured from it may be shorter than configured.
func TestOldSecondPrecisionRoundsUp(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConditions: "KernelDeadlock=True,0s"}}}
	setDrainCondition(n, v1.ConditionFalse, "Drain activity scheduled 2026-11-21T10:00:00Z | Failed: 2026-11-21T10:01:00Z", t0)
	s := readState(n)
	if !s.scheduledAt.Equal(t0.Add(time.Second)) || !s.finishedAt.Equal(t0.Add(time.Minute+time.Second)) {
		t.Errorf("old format: scheduled %v finished %v, want both rounded up a second", s.scheduledAt, s.finishedAt)
	}
	setDrainCondition(n, v1.ConditionTrue, "something else", t0)
	if s := readState(n); !s.scheduledAt.Equal(t0.Add(time.Second)) {
		t.Errorf("fallback to lastTransitionTime must round up: %v", s.scheduledAt)
	}
	setAnnotation(n, AnnotationBlockedSince, "2026-11-21T10:00:00.250000000Z")
	if s := readState(n); !s.blockedSince.Equal(t0.Add(250 * time.Millisecond)) {
		t.Errorf("blocked since %v", s.blockedSince)
	}
	setAnnotation(n, AnnotationDrainStarted, "2026-11-21T10:00:05Z")
	if s := readState(n); !s.startedAt.Equal(t0.Add(6 * time.Second)) {
		t.Errorf("drain started %v, want rounded up a second", s.startedAt)
	}
	setAnnotation(n, AnnotationBlocked, `{"drain":"x"}`)
	cordon(n, holders{}, t0, "")
	for _, a := range []string{AnnotationBlockedSince, AnnotationBlocked} {
		if _, ok := n.Annotations[a]; ok {
			t.Errorf("a new cordon must forget %s", a)
		}
	}
	if _, ok := n.Annotations[AnnotationDrainStarted]; !ok {
		t.Error("the drain buffer's start must outlive the cordon")
	}
}

func TestReturningOwner(t *testing.T) {
	if returningOwner(pod(owned("DaemonSet"))) == "" {
		t.Error("a DaemonSet recreates its pod on the node")
	}
	if returningOwner(pod(nil)) != "" {
		t.Error("a ReplicaSet pod that does not tolerate the cordon goes elsewhere")
	}
	tolerant := pod(func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	})
	if returningOwner(tolerant) == "" {
		t.Error("a pod tolerating the cordon can be put back on the node")
	}
	if returningOwner(pod(func(p *v1.Pod) { p.OwnerReferences = nil; p.Spec.Tolerations = tolerant.Spec.Tolerations })) != "" {
		t.Error("nothing recreates a pod without a controller")
	}
}

func TestClearedSince(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	rs := []rules.Condition{{Type: "KernelDeadlock", Status: v1.ConditionTrue}, {Type: v1.NodeReady, Status: v1.ConditionUnknown}}
	n := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0)},
		{Type: v1.NodeReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))},
	}}}
	since, ok := clearedSince(n, rs)
	if !ok || !since.Equal(t0.Add(time.Minute+time.Second)) { // rounded up to the end of the second
		t.Errorf("cleared since %v %v, want the latest transition", since, ok)
	}
	n.Status.Conditions[1].Status = v1.ConditionUnknown
	if _, ok := clearedSince(n, rs); ok {
		t.Errorf("Ready=Unknown still holds")
	}
}

func TestRulesFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`apiVersion: nodeshepherd.io/v1alpha1
kind: DrainRules
conditions:
- KernelDeadlock=True,10m
- type: Ready
  status: Unknown
  minDuration: 30m
- type: DiskPressure
- {type: MemoryPressure, forceAfter: 2h}
nodeSelector: pool in (batch)
nodeExpression: '!has(node.metadata.labels.critical)'
windows: ["Mon-Fri 22:00-06:00", "Sat,Sun 00:00-24:00"]
timeZone: Europe/Paris
`)
	r, err := LoadRules(good)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"KernelDeadlock=True,10m0s", "Ready=Unknown,30m0s", "DiskPressure=True", "MemoryPressure=True,0s,force-after=2h0m0s"}
	for i, c := range r.Conditions {
		if c.String() != want[i] {
			t.Errorf("condition %d = %s, want %s", i, c, want[i])
		}
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "batch"}}}
	if ok, err := r.Selector.Matches(node); !ok || err != nil {
		t.Errorf("selector: %v %v", ok, err)
	}
	if got := r.Windows.String(); got != "Mon-Fri 22:00-06:00, Sat,Sun 00:00-24:00 Europe/Paris" {
		t.Errorf("windows %q", got)
	}
	bad := map[string]string{
		"rules.yaml:4: ": "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions:\n- KernelDeadlock=True,tenminutes\n",
		"rules.yaml:5: field minDurationn not found":                       "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions:\n- type: Ready\n  minDurationn: 5m\n",
		"rules.yaml:3: field condition not found":                          "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\ncondition: []\n",
		"expected apiVersion":                                              "apiVersion: v1\nkind: DrainRules\n",
		"label selector":                                                   "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions: [KernelDeadlock]\nnodeSelector: 'a in ('\n",
		"conditions: name at least one":                                    "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\n",
		"rules.yaml:4: window \"Mon-Fry 22:00-06:00\"":                     "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions: [KernelDeadlock]\nwindows: [Mon-Fry 22:00-06:00]\n",
		"rules.yaml:5: time zone \"Mars/Olympus\"":                         "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions: [KernelDeadlock]\nwindows: ['* 01:00-02:00']\ntimeZone: Mars/Olympus\n",
		"rules.yaml:3: condition \"KernelDeadlock=True,1m,force-after=x\"": "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions: [\"KernelDeadlock=True,1m,force-after=x\"]\n",
	}
	for want, body := range bad {
		_, err := LoadRules(write(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want error containing %q, got %v", want, err)
		}
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	cases := map[string]func(*Config){
		"--drain-condition":                                     func(c *Config) { c.Conditions = []string{"KernelDeadlock=True,tenminutes"} },
		"--drain-node-expression":                               func(c *Config) { c.NodeExpression = "node.metadata ==" },
		"--max-cordoned-nodes":                                  func(c *Config) { c.Budget.MaxCordonedNodes = "120%" },
		"--max-concurrent-drains":                               func(c *Config) { c.Budget.MaxConcurrentDrains = -1 },
		"--drain-timeout":                                       func(c *Config) { c.DrainTimeout = 0 },
		"--protected-pod-annotation":                            func(c *Config) { c.ProtectedPodAnnotations = []string{"=x"} },
		"--drain-rules replaces":                                func(c *Config) { c.File = "x.yaml" },
		"--drain-force-after":                                   func(c *Config) { c.ForceAfter = -time.Second },
		"--drain-force-after 1s is below the least force-after": func(c *Config) { c.ForceAfter = time.Second },
		"--drain-window":                                        func(c *Config) { c.Windows = []string{"Mon-Fry 22:00-06:00"} },
		"--drain-window-time-zone":                              func(c *Config) { c.Windows, c.WindowTimeZone = []string{"* 01:00-02:00"}, "Mars/Olympus" },
	}
	for flag, mut := range cases {
		c := DefaultConfig()
		c.Conditions = []string{"KernelDeadlock"}
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: got %v", flag, err)
		}
	}
}

func TestExplainPDBs(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ready := func(name, node string, ok bool) *v1.Pod {
		st := v1.ConditionFalse
		if ok {
			st = v1.ConditionTrue
		}
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": "web"}},
			Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: st}}}}
	}
	blocked := ready("web-1", "sick", true)
	for _, p := range []*v1.Pod{blocked, ready("web-2", "node-3", false), ready("web-3", "", false)} {
		_ = idx.Add(p)
	}
	c := &Controller{pods: idx}
	pdbs := []policyv1.PodDisruptionBudget{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
			Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(3)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 3, ExpectedPods: 3}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
	}
	want := "PodDisruptionBudget web refuses: 0 disruptions allowed, currentHealthy 1, desiredHealthy 3, expectedPods 3, minAvailable 3; not Ready: web-2 on node-3, web-3 on no node (Pending)"
	if got := c.explainPDBs(blocked, pdbs); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestExplainSkippedAndWaiting(t *testing.T) {
	// No node objects: the decisions held in memory say it all.
	c := &Controller{nodes: corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), running: map[string]*runningDrain{"busy": {}},
		skipped: map[string]skipInfo{"human": {reason: SkipCordonedByOther, message: "Cordoned by someone else; not drained although KernelDeadlock=True"}},
		waiting: map[string]waitInfo{"later": {action: "drain", budget: BudgetMaintenanceWindow, reason: "outside the maintenance windows"}}}
	cases := map[string]NodeDecision{
		"human": {State: "skipped", Reason: "cordoned-by-someone-else: Cordoned by someone else; not drained although KernelDeadlock=True"},
		"later": {State: "waiting", Reason: "waiting to drain (maintenance-window): outside the maintenance windows"},
		"busy":  {State: "draining"},
	}
	for node, want := range cases {
		if got := c.Explain(node); got != want {
			t.Errorf("Explain(%s) = %+v, want %+v", node, got, want)
		}
	}
}

// A cordon retried after the same failure is said once; a new failure
// message, or a success followed by a new attempt, is said again.
func TestAttemptEventsOncePerChange(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	c := &Controller{recorder: rec, said: map[string]map[string]string{}}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	for i := 0; i < 3; i++ {
		c.event(n, EventCordonStarting, "Cordoning node: KernelDeadlock=True")
		c.event(n, EventCordonFailed, "Cordoning node failed: the server is unavailable")
	}
	c.event(n, EventCordonFailed, "Cordoning node failed: forbidden")
	c.event(n, EventCordonSucceeded, "Cordoned node: KernelDeadlock=True")
	c.event(n, EventCordonStarting, "Cordoning node: KernelDeadlock=True")
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 5 {
		t.Errorf("%d events, want 5 (starting, failed, failed with a new reason, succeeded, starting again): %q", len(got), got)
	}
}

// A drain retried and failing the same way says DrainScheduled, DrainStarting
// and DrainFailed once; a new reason is said again; a success starts afresh.
func TestDrainEventsOncePerChange(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	c := &Controller{recorder: rec, said: map[string]map[string]string{}}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	for i := 0; i < 4; i++ {
		c.eventOnce(n, EventDrainScheduled, "scheduled", fmt.Sprintf("Will drain node after 10:0%d", i))
		c.eventOnce(n, EventDrainStarting, "2 pods", "Draining node: 2 pods to evict")
		c.eventOnce(n, EventDrainFailed, "web (PDB web)", fmt.Sprintf("Draining node failed ...; retrying at 10:0%d", i))
	}
	c.eventOnce(n, EventDrainFailed, "web (PDB web); db (PDB db)", "Draining node failed: another blocker")
	c.eventOnce(n, EventDrainSucceeded, "", "Drained node")
	c.eventOnce(n, EventDrainScheduled, "scheduled", "Will drain node after 11:00")
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"DrainScheduled", "DrainStarting", "DrainFailed", "DrainFailed", "DrainSucceeded", "DrainScheduled"}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if !strings.Contains(got[i], " "+w+" ") {
			t.Errorf("event %d = %q, want %s", i, got[i], w)
		}
	}
}

// Blockers are named grouped by why, the largest group first, up to a
// limit and then counted.
func TestFormatBlockers(t *testing.T) {
	var bs []blocker
	for _, p := range []string{"ns/web-3", "ns/web-1", "ns/web-2"} {
		bs = append(bs, blocker{pod: p, why: "PodDisruptionBudget web refuses"})
	}
	bs = append(bs, blocker{pod: "ns/db-0", why: "terminating"})
	if got, want := formatBlockers(bs, 0), "ns/web-1, ns/web-2, ns/web-3 (PodDisruptionBudget web refuses); ns/db-0 (terminating)"; got != want {
		t.Errorf("all:\n got %q\nwant %q", got, want)
	}
	if got, want := formatBlockers(bs, 2), "ns/web-1, ns/web-2 (PodDisruptionBudget web refuses); and 2 more pods"; got != want {
		t.Errorf("first 2:\n got %q\nwant %q", got, want)
	}
	if got := formatBlockers(nil, 5); got != "" {
		t.Errorf("none: %q", got)
	}
}

// force-after counts one pod's refusals without a break: any other outcome
// ends the count, and the record on the node is bound to its drain.
func TestContinuousBlockage(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", UID: "u1"}}
	e := &podEviction{pod: pod}
	e.refused, e.lastErr = true, "eviction refused: PDB"
	if !updateBlockage(e, t0) || !e.blockedSince.Equal(t0) {
		t.Fatalf("first refusal must start the count: %v", e.blockedSince)
	}
	if updateBlockage(e, t0.Add(10*time.Second)) || !e.blockedSince.Equal(t0) {
		t.Fatalf("a further refusal continues it: %v", e.blockedSince)
	}
	c := &Controller{}
	if due, _ := c.forceDue(context.Background(), e, time.Minute, t0.Add(59*time.Second)); due {
		t.Error("forced before force-after")
	}
	if due, _ := c.forceDue(context.Background(), e, time.Minute, t0.Add(time.Minute)); !due {
		t.Error("not forced after a minute of refusals (a bare pod: no workload that could be rolling out)")
	}
	e.refused, e.lastErr = false, "eviction failed: timeout"
	if !updateBlockage(e, t0.Add(70*time.Second)) || !e.blockedSince.IsZero() {
		t.Fatalf("an error that is no refusal must end the count")
	}
	if due, _ := c.forceDue(context.Background(), e, time.Minute, t0.Add(2*time.Minute)); due {
		t.Error("forced without a running count")
	}

	e.refused, e.lastErr = true, "eviction refused: PDB"
	updateBlockage(e, t0.Add(80*time.Second))
	// Another pod's eviction accepted in a pass: budgets move, every count
	// starts again; a pass with only refusals changes nothing.
	other := &podEviction{pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u2"}}, evicted: true}
	tracked := map[types.UID]*podEviction{"u1": e, "u2": other}
	if restartCounts(tracked, []*podEviction{e}, t0.Add(85*time.Second)) {
		t.Error("a pass of refusals restarted the count")
	}
	if !restartCounts(tracked, []*podEviction{e, other}, t0.Add(90*time.Second)) || !e.blockedSince.Equal(t0.Add(90*time.Second)) {
		t.Errorf("an accepted eviction must restart the count: %v", e.blockedSince)
	}
	e.blockedSince = t0.Add(80 * time.Second)
	rec, first := blockAnnotations(t0, []*podEviction{e})
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationBlocked: rec}}}
	if got := readBlocked(n, t0)["u1"]; !got.Equal(t0.Add(80*time.Second)) || first != formatTime(got) {
		t.Errorf("read back %v (earliest %s) from %s", got, first, rec)
	}
	if got := readBlocked(n, t0.Add(time.Hour)); got != nil {
		t.Errorf("another drain's record must count for nothing: %v", got)
	}
	n.Annotations[AnnotationBlocked] = "{not json"
	if got := readBlocked(n, t0); got != nil {
		t.Errorf("a record that does not parse must count for nothing: %v", got)
	}
}

func TestDeploymentRollingOut(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 2}}
	d.Status.ObservedGeneration = 1
	if why := deploymentRollingOut(d); !strings.Contains(why, "not yet observed") {
		t.Errorf("unobserved generation: %q", why)
	}
	d.Status.ObservedGeneration = 2
	for reason, rolling := range map[string]bool{"ReplicaSetUpdated": true, "NewReplicaSetAvailable": false} {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: v1.ConditionTrue, Reason: reason}}
		if got := deploymentRollingOut(d) != ""; got != rolling {
			t.Errorf("Progressing=True %s: rolling out %v, want %v", reason, got, rolling)
		}
	}
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: v1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	if why := deploymentRollingOut(d); why != "" {
		t.Errorf("a rollout past its deadline is stuck, not moving: %q", why)
	}
}

// A drain past its timeout waits for force-after only while every pod left
// is blocked without a break, deleted by force-after (for its grace
// period), or terminating; anything else fails it as before.
func TestForcePending(t *testing.T) {
	deadline := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	pod := func() *v1.Pod { return &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(30))}} }
	blocked := &podEviction{pod: pod(), refused: true, blockedSince: deadline.Add(-time.Second)}
	forced := &podEviction{pod: pod(), evicted: true, forced: true, forcedAt: deadline.Add(time.Minute)}
	terminating := &podEviction{pod: pod(), evicted: true}
	erring := &podEviction{pod: pod(), lastErr: "eviction failed: timeout"}
	if ok, _ := forcePending([]*podEviction{blocked}, 0, deadline); ok {
		t.Error("pending without force-after")
	}
	if ok, until := forcePending([]*podEviction{blocked, terminating}, time.Minute, deadline); !ok || !until.Equal(deadline.Add(time.Minute+maxEvictionBackoff)) {
		t.Errorf("blocked: %v until %v", ok, until)
	}
	if ok, until := forcePending([]*podEviction{forced}, time.Minute, deadline); !ok || !until.Equal(deadline.Add(time.Minute+30*time.Second+time.Minute)) {
		t.Errorf("forced: %v until %v, want its grace period and a minute after the force", ok, until)
	}
	if ok, _ := forcePending([]*podEviction{terminating}, time.Minute, deadline); ok {
		t.Error("pending with nothing force-after waits for")
	}
	if ok, _ := forcePending([]*podEviction{blocked, erring}, time.Minute, deadline); ok {
		t.Error("pending although a pod fails otherwise than by a refusal")
	}
}

// A cordon whose rules are all gone from the configuration is lifted at
// once, saying which rules they were; one still configured keeps it.
func TestRulesGone(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConditions: "KernelDeadlock=True,10m0s;Ready=Unknown,30m0s"}}}
	kd := rules.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue}
	disk := rules.Condition{Type: "DiskPressure", Status: v1.ConditionTrue}
	if got := rulesGone(n, []rules.Condition{disk, kd}); got != "" {
		t.Errorf("KernelDeadlock=True is still a rule: %q", got)
	}
	if got := rulesGone(n, []rules.Condition{disk, {Type: "KernelDeadlock", Status: v1.ConditionFalse}}); !strings.Contains(got, "(KernelDeadlock=True,10m0s;Ready=Unknown,30m0s) are no longer configured") {
		t.Errorf("rules gone: %q", got)
	}
	delete(n.Annotations, AnnotationConditions)
	if got := rulesGone(n, nil); got != "" {
		t.Errorf("no record: %q", got)
	}
}
