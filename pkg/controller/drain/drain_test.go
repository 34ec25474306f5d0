package drain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
)

func pod(mut func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}}}
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
	cordon(n, []rules.Condition{{Type: "KernelDeadlock", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute}})
	if got := n.Annotations[AnnotationConditions]; got != "KernelDeadlock=True,10m0s" {
		t.Errorf("annotation %q (Draino's Type=Status,duration)", got)
	}
	setDrainCondition(n, v1.ConditionTrue, scheduledMessage(t0), t0)
	s := readState(n)
	if !s.owned || !s.cordoned || s.phase != phaseInFlight || !s.scheduledAt.Equal(t0) {
		t.Fatalf("scheduled: %+v", s)
	}
	if c := n.Status.Conditions[0]; c.Reason != "Draino" || c.Message != "Drain activity scheduled 2026-11-21T10:00:00Z" {
		t.Errorf("condition %+v is not Draino's", c)
	}
	t1 := t0.Add(time.Minute)
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(t0, false, t1), t1)
	setAnnotation(n, AnnotationAttempts, "3")
	s = readState(n)
	if s.phase != phaseFailed || !s.finishedAt.Equal(t1) || !s.scheduledAt.Equal(t0) || s.attempts != 3 {
		t.Fatalf("failed: %+v", s)
	}
	if want := "Drain activity scheduled 2026-11-21T10:00:00Z | Failed: 2026-11-21T10:01:00Z"; n.Status.Conditions[0].Message != want {
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
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(t0, true, t1), t1)
	if readState(n).phase != phaseCompleted {
		t.Errorf("completed not read back")
	}
	release(n, true)
	removeDrainCondition(n)
	if s := readState(n); s.owned || s.cordoned || s.phase != phaseNone || s.attempts != 0 {
		t.Errorf("released: %+v", s)
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
	if !ok || !since.Equal(t0.Add(time.Minute)) {
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
nodeSelector: pool in (batch)
nodeExpression: '!has(node.metadata.labels.critical)'
`)
	r, err := LoadRules(good)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"KernelDeadlock=True,10m0s", "Ready=Unknown,30m0s", "DiskPressure=True"}
	for i, c := range r.Conditions {
		if c.String() != want[i] {
			t.Errorf("condition %d = %s, want %s", i, c, want[i])
		}
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "batch"}}}
	if ok, err := r.Selector.Matches(node); !ok || err != nil {
		t.Errorf("selector: %v %v", ok, err)
	}
	bad := map[string]string{
		"rules.yaml:4: ": "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions:\n- KernelDeadlock=True,tenminutes\n",
		"rules.yaml:5: field minDurationn not found": "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions:\n- type: Ready\n  minDurationn: 5m\n",
		"rules.yaml:3: field condition not found":    "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\ncondition: []\n",
		"expected apiVersion":                        "apiVersion: v1\nkind: DrainRules\n",
		"label selector":                             "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions: [KernelDeadlock]\nnodeSelector: 'a in ('\n",
		"conditions: name at least one":              "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\n",
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
		"--drain-condition":          func(c *Config) { c.Conditions = []string{"KernelDeadlock=True,tenminutes"} },
		"--drain-node-expression":    func(c *Config) { c.NodeExpression = "node.metadata ==" },
		"--max-cordoned-nodes":       func(c *Config) { c.Budget.MaxCordonedNodes = "120%" },
		"--max-concurrent-drains":    func(c *Config) { c.Budget.MaxConcurrentDrains = -1 },
		"--drain-timeout":            func(c *Config) { c.DrainTimeout = 0 },
		"--protected-pod-annotation": func(c *Config) { c.ProtectedPodAnnotations = []string{"=x"} },
		"--drain-rules replaces":     func(c *Config) { c.File = "x.yaml" },
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
