package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

const gpuLabel = "nvidia.com/gpu.present"

// gpuPolicy is examples/remediation/gpu-pool.yaml with the general pool's
// ladder (a Taint and a Fence around drain, reboot and replace).
func gpuPolicy(name string) rem.RemediationPolicy {
	d := func(t time.Duration) metav1.Duration { return metav1.Duration{Duration: t} }
	return rem.RemediationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rem.PolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{gpuLabel: "true"}},
		Unhealthy:    []rem.UnhealthyCondition{{Type: "AcceleratedHardwareReady", Status: v1.ConditionFalse, For: d(10 * time.Minute)}},
		HealthyHold:  d(5 * time.Minute),
		Steps: []rem.Step{
			{Action: rem.ActionTaint, Timeout: d(10 * time.Minute), Taint: &rem.TaintSpec{Key: "nodeshepherd.io/unhealthy", Effect: v1.TaintEffectNoSchedule}},
			{Action: rem.ActionDrain, Timeout: d(time.Hour)},
			{Action: rem.ActionReboot, Timeout: d(20 * time.Minute)},
			{Action: rem.ActionReplace, Timeout: d(30 * time.Minute)},
			{Action: rem.ActionFence, Timeout: d(10 * time.Minute)},
		},
		Brakes: rem.Brakes{MaxInRepair: ptr.To(intstr.FromInt32(1)), MaxUnhealthy: ptr.To(intstr.FromString("20%"))},
	}}
}

// gpuNode is a GPU node whose accelerators failed `failed` ago (0: healthy).
func gpuNode(name string, failed time.Duration) *v1.Node {
	n := node(name, "z1", v1.ConditionTrue, time.Second)
	n.Labels[gpuLabel] = "true"
	status, since := v1.ConditionTrue, time.Hour
	if failed > 0 {
		status, since = v1.ConditionFalse, failed
	}
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "AcceleratedHardwareReady", Status: status, LastTransitionTime: ago(since)})
	return n
}

func policyList(ps ...rem.RemediationPolicy) policies {
	var out policies
	for i := range ps {
		out.items = append(out.items, policyOf(&ps[i]))
	}
	return out
}

// recordRepair gives n the record of policy at step (from 0) since `since` ago.
func recordRepair(n *v1.Node, policy string, step int, action rem.Action, since time.Duration) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[rem.AnnotationState] = rem.EncodeState(policy, action, rem.State{Step: step, StepSince: now.Add(-since), RepairSince: now.Add(-since - time.Hour)})
}

var withProvider = CloudProvider{Known: true, Name: "fake", Repairs: true, Fences: true}

func judge(t *testing.T, n *v1.Node, nodes []*v1.Node, pols policies, cloud CloudProvider) (Remediation, []string) {
	t.Helper()
	var warnings []string
	r := remediationOf(n, append(nodes, n), pols, cloud, now, &warnings)
	return r, warnings
}

func TestRemediationNoPolicySelectsTheNode(t *testing.T) {
	bad := gpuPolicy("bad")
	bad.Spec.Steps[0].Timeout.Duration = time.Second
	bad.Spec.NodeSelector = nil // would select every node, but refused
	noGPU := node("a", "z1", v1.ConditionTrue, time.Second)
	r, _ := judge(t, noGPU, nil, policyList(gpuPolicy("gpu"), bad), withProvider)
	if r.State != "none" || r.Summary != "no policy selects this node" || len(r.SelectedBy) != 0 || r.Decision != nil || r.Steps != nil {
		t.Fatalf("remediation %+v", r)
	}
	if len(r.Refused) != 1 || r.Refused[0].Name != "bad" || !strings.Contains(r.Refused[0].Why, "spec.steps[0].timeout") {
		t.Errorf("refused %+v", r.Refused)
	}
}

func TestRemediationWithoutTheCRD(t *testing.T) {
	n := gpuNode("a", time.Hour)
	recordRepair(n, "gpu", 1, rem.ActionDrain, time.Minute)
	r, _ := judge(t, n, nil, policies{missing: true}, withProvider)
	if r.State != "not-installed" || !strings.HasPrefix(r.Summary, "no RemediationPolicy resource (CRD not installed)") ||
		!strings.Contains(r.Summary, "repair record of policy gpu (step 2, Drain") {
		t.Errorf("remediation %+v", r)
	}
}

func TestRemediationSeveralPoliciesSelectTheNode(t *testing.T) {
	everyone := gpuPolicy("everyone")
	everyone.Spec.NodeSelector = nil
	r, _ := judge(t, gpuNode("a", time.Hour), nil, policyList(gpuPolicy("gpu"), everyone), withProvider)
	if r.State != "conflict" || r.Summary != "selected by 2 policies (everyone, gpu): none repairs it" || r.Decision != nil {
		t.Errorf("remediation %+v", r)
	}
}

func TestRemediationHealthyAndPending(t *testing.T) {
	r, _ := judge(t, gpuNode("a", 0), nil, policyList(gpuPolicy("gpu")), withProvider)
	if r.State != "healthy" || r.Policy != "gpu" || r.Health.State != "healthy" || r.Decision.Verdict != "None" || r.Decision.Reason != "healthy" {
		t.Fatalf("remediation %+v health %+v decision %+v", r, r.Health, r.Decision)
	}
	if len(r.Steps) != 5 || r.Steps[0].State != "pending" || r.Steps[0].Taint != "nodeshepherd.io/unhealthy:NoSchedule" || r.Steps[2].State != "pending" || r.Steps[2].Why != "" {
		t.Errorf("steps %+v", r.Steps)
	}

	// Failed two minutes ago, counted after ten (from the end of the second).
	r, _ = judge(t, gpuNode("a", 2*time.Minute), nil, policyList(gpuPolicy("gpu")), withProvider)
	if want := now.Add(-2*time.Minute + time.Second + 10*time.Minute); r.State != "pending" || r.Health.State != "pending" || !r.Health.PendingUntil.Equal(want) ||
		!strings.Contains(r.Summary, "unhealthy at "+stamp(want)) {
		t.Errorf("remediation %+v health %+v", r, r.Health)
	}
}

func TestRemediationBlockedByMaxUnhealthy(t *testing.T) {
	var pool []*v1.Node
	for i, failed := range []time.Duration{time.Hour, time.Hour, 0, 0, 0, 0, 0, 0, 0} {
		pool = append(pool, gpuNode(string(rune('b'+i)), failed))
	}
	r, _ := judge(t, gpuNode("a", time.Hour), pool, policyList(gpuPolicy("gpu")), withProvider)
	want := "repair blocked: 3 of 10 nodes of pool gpu unhealthy, limit 20%"
	if r.State != "blocked" || r.Decision.Verdict != "Blocked" || r.Decision.Reason != want || !strings.HasSuffix(r.Summary, want) {
		t.Fatalf("remediation %+v decision %+v", r, r.Decision)
	}
	if p := r.Pool; p.Nodes != 10 || p.Unhealthy != 3 || p.InRepair != 0 || p.Zone != "z1" {
		t.Errorf("pool %+v", p)
	}
	if r.Health.State != "unhealthy" || !strings.HasPrefix(r.Health.Why, "AcceleratedHardwareReady=False since") {
		t.Errorf("health %+v", r.Health)
	}

	// One unhealthy of ten starts; a person's cordon holds it back.
	r, _ = judge(t, gpuNode("a", time.Hour), pool[2:], policyList(gpuPolicy("gpu")), withProvider)
	if r.State != "unhealthy" || r.Decision.Verdict != "Start" || r.Decision.Step != 1 || !strings.Contains(r.Summary, "starts step 1 (Taint)") {
		t.Errorf("remediation %+v decision %+v", r, r.Decision)
	}
	cordoned := gpuNode("a", time.Hour)
	cordoned.Spec.Unschedulable = true
	if r, _ = judge(t, cordoned, pool[2:], policyList(gpuPolicy("gpu")), withProvider); r.Decision.Reason != "repair blocked: the node is cordoned by someone else" {
		t.Errorf("cordoned by a person: decision %+v", r.Decision)
	}
	owner.Set(cordoned, owner.Cordon, owner.Record{Controller: "drain", Since: now, Why: "x", Until: "y"})
	if r, _ = judge(t, cordoned, pool[2:], policyList(gpuPolicy("gpu")), withProvider); r.Decision.Verdict != "Start" {
		t.Errorf("cordoned by nodeshepherd: decision %+v", r.Decision)
	}

	// Paused by the annotation.
	paused := gpuPolicy("gpu")
	paused.Annotations = map[string]string{"nodeshepherd.io/remediation-paused": "true"}
	if r, _ = judge(t, gpuNode("a", time.Hour), pool[2:], policyList(paused), withProvider); !r.Paused || r.Decision.Reason != "repair blocked: paused" {
		t.Errorf("paused: %+v decision %+v", r, r.Decision)
	}
}

func TestRemediationInRepairAtStepTwoWithTheNextStepsTime(t *testing.T) {
	n := gpuNode("a", 2*time.Hour)
	recordRepair(n, "gpu", 1, rem.ActionDrain, 20*time.Minute)
	// Another node's repair, and an unreadable record, count in the pool.
	other, broken := gpuNode("b", time.Hour), gpuNode("c", 0)
	recordRepair(other, "gpu", 0, rem.ActionTaint, time.Minute)
	broken.Annotations = map[string]string{rem.AnnotationState: "{"}
	r, warnings := judge(t, n, []*v1.Node{other, broken}, policyList(gpuPolicy("gpu")), withProvider)
	if len(warnings) != 0 {
		t.Errorf("warnings %v (another node's record is not this one's)", warnings)
	}
	if r.State != "in-repair" || r.Record == nil || r.Record.Step != 2 || r.Decision.Verdict != "None" || r.Decision.Step != 2 {
		t.Fatalf("remediation %+v decision %+v", r, r.Decision)
	}
	cur := r.Steps[1]
	since, next := now.Add(-20*time.Minute), now.Add(40*time.Minute)
	if cur.State != "current" || !cur.Since.Equal(since) || !cur.NextAt.Equal(next) || cur.Next != "step 3 (Reboot)" {
		t.Errorf("current step %+v", cur)
	}
	if r.Steps[0].State != "passed" || r.Steps[2].State != "pending" || r.Steps[4].State != "pending" {
		t.Errorf("steps %+v", r.Steps)
	}
	if want := "step 2 (Drain) under way; next at " + stamp(next); r.Decision.Reason != want || !r.Decision.Next.Equal(next) {
		t.Errorf("decision %+v, want %q", r.Decision, want)
	}
	if p := r.Pool; p.Nodes != 3 || p.InRepair != 3 || p.Unhealthy != 2 {
		t.Errorf("pool %+v", p)
	}

	// Healthy again: done after the hold time.
	healed := gpuNode("a", 0)
	healed.Status.Conditions[1].LastTransitionTime = ago(2 * time.Minute)
	recordRepair(healed, "gpu", 1, rem.ActionDrain, 20*time.Minute)
	if r, _ = judge(t, healed, nil, policyList(gpuPolicy("gpu")), withProvider); r.State != "in-repair" || r.Health.State != "healthy" ||
		!strings.Contains(r.Summary, "the repair ends at "+stamp(now.Add(-2*time.Minute+time.Second+5*time.Minute))) {
		t.Errorf("healthy again: %+v", r)
	}
	// Timed out: the controller climbs.
	recordRepair(n, "gpu", 1, rem.ActionDrain, 2*time.Hour)
	if r, _ = judge(t, n, nil, policyList(gpuPolicy("gpu")), withProvider); r.Decision.Verdict != "Advance" || r.Decision.Step != 3 ||
		!strings.Contains(r.Summary, "climbs to step 3 (Reboot)") {
		t.Errorf("timed out: %+v decision %+v", r, r.Decision)
	}
	// The last step timed out: a person.
	recordRepair(n, "gpu", 4, rem.ActionFence, 2*time.Hour)
	if r, _ = judge(t, n, nil, policyList(gpuPolicy("gpu")), withProvider); r.State != "exhausted" || r.Steps[4].NextAt != nil ||
		!strings.Contains(r.Steps[4].Next, "a person decides") {
		t.Errorf("exhausted: %+v steps %+v", r, r.Steps)
	}
	// A policy that stops selecting the node ends its repair.
	n.Labels[gpuLabel] = "false"
	if r, _ = judge(t, n, nil, policyList(gpuPolicy("gpu")), withProvider); r.State != "ending" || !strings.Contains(r.Summary, "no longer selects") {
		t.Errorf("deselected: %+v", r)
	}
}

func TestRemediationSkipsRebootWithoutACloudProvider(t *testing.T) {
	n := gpuNode("a", 2*time.Hour)
	recordRepair(n, "gpu", 1, rem.ActionDrain, 20*time.Minute)
	// Without any provider a policy with a Fence step is refused, as the
	// controller refuses it (CannotFence, issue 46).
	none := CloudProvider{Known: true}
	r, _ := judge(t, n, nil, policyList(gpuPolicy("gpu")), none)
	if len(r.Refused) != 1 || !strings.Contains(r.Refused[0].Why, "step 5 (Fence) needs a cloud provider that powers machines off") ||
		!strings.HasPrefix(r.CloudProvider, "none") || !strings.Contains(r.CloudProvider, "Fence step is refused") {
		t.Errorf("no provider: refused %+v, cloud provider %q", r.Refused, r.CloudProvider)
	}
	// A provider that powers off but cannot reboot or replace.
	fenceOnly := CloudProvider{Known: true, Name: "acme", Fences: true}
	r, _ = judge(t, n, nil, policyList(gpuPolicy("gpu")), fenceOnly)
	for _, i := range []int{2, 3} {
		if s := r.Steps[i]; s.State != "skipped" || !strings.Contains(s.Why, "the cloud provider acme cannot") {
			t.Errorf("step %d: %+v", i+1, s)
		}
	}
	if cur := r.Steps[1]; cur.Next != "step 5 (Fence)" {
		t.Errorf("current %+v", cur)
	}
	// At the timeout the controller passes over them, saying so.
	recordRepair(n, "gpu", 1, rem.ActionDrain, 2*time.Hour)
	r, _ = judge(t, n, nil, policyList(gpuPolicy("gpu")), fenceOnly)
	if d := r.Decision; d.Verdict != "Advance" || d.Step != 5 || len(d.Skipped) != 2 || !strings.Contains(d.Skipped[0], "step 3 (Reboot)") {
		t.Errorf("decision %+v", d)
	}

	// Without a configuration file the provider is unknown: shown as one.
	r, _ = judge(t, gpuNode("a", 0), nil, policyList(gpuPolicy("gpu")), CloudProvider{})
	if s := r.Steps[2]; s.State != "pending" || !strings.Contains(s.Why, "unknown without --config") || !strings.HasPrefix(r.CloudProvider, "unknown") {
		t.Errorf("unknown provider: step %+v, %q", s, r.CloudProvider)
	}
}

func TestRemediationUnreadableRecordWarns(t *testing.T) {
	n := gpuNode("a", time.Hour)
	n.Annotations = map[string]string{rem.AnnotationState: `{"policy":"gpu","step":1}`}
	r, warnings := judge(t, n, nil, policyList(gpuPolicy("gpu")), withProvider)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "annotation "+rem.AnnotationState) || !strings.Contains(warnings[0], "does not act on the node") {
		t.Fatalf("warnings %v", warnings)
	}
	if r.State != "record-unreadable" || r.Decision.Verdict != "Blocked" || !strings.HasPrefix(r.Decision.Reason, "repair record unreadable") || r.Record != nil {
		t.Errorf("remediation %+v decision %+v", r, r.Decision)
	}
	for _, s := range r.Steps {
		if s.State == "current" {
			t.Errorf("a current step with an unreadable record: %+v", s)
		}
	}
	// A step beyond the policy's ladder (shortened since) is as unreadable.
	recordRepair(n, "gpu", 7, rem.ActionFence, time.Minute)
	if r, warnings = judge(t, n, nil, policyList(gpuPolicy("gpu")), withProvider); r.State != "record-unreadable" || len(warnings) != 1 || !strings.Contains(warnings[0], "step 8") {
		t.Errorf("remediation %+v warnings %v", r, warnings)
	}
}

// policyServer serves the RemediationPolicies as the API server does, and
// a clientset whose discovery REST client reaches it.
func policyServer(t *testing.T, handler http.HandlerFunc, objs ...runtime.Object) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	d, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return withDiscovery{Interface: fake.NewClientset(objs...), d: d}
}

type withDiscovery struct {
	kubernetes.Interface
	d discovery.DiscoveryInterfaces
}

func (c withDiscovery) Discovery() discovery.DiscoveryInterfaces { return c.d }

func TestExplainNodeReadsThePolicies(t *testing.T) {
	items := []any{gpuPolicy("gpu"), json.RawMessage(`{"metadata":{"name":"odd"},"spec":{"steps":"many"}}`)}
	var paths []string
	cs := policyServer(t, func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicyList", "items": items})
	}, gpuNode("a", time.Hour), gpuNode("b", 0), gpuNode("c", 0), gpuNode("d", 0), gpuNode("e", 0))
	o := options()
	o.Cloud = withProvider
	e, err := Node(context.Background(), cs, "a", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || paths[0] != "GET /apis/nodeshepherd.io/v1alpha1/remediationpolicies" {
		t.Errorf("requests %v", paths)
	}
	r := e.Remediation
	if r.State != "unhealthy" || r.Policy != "gpu" || len(r.Refused) != 1 || r.Refused[0].Name != "odd" || !strings.HasPrefix(r.Refused[0].Why, "unreadable: ") {
		t.Errorf("remediation %+v", r)
	}

	var table bytes.Buffer
	if err := Write(&table, "table", e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"unhealthy: unhealthy under policy gpu: the controller starts step 1 (Taint)", "Selected by:", "odd: unreadable",
		"Decision:", "Start: unhealthy: AcceleratedHardwareReady=False", "STEP  ACTION   TIMEOUT", "3     Reboot   20m0s    pending"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := Write(&js, "json", e); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Remediation struct {
			Policy     *string         `json:"policy"`
			SelectedBy []string        `json:"selectedBy"`
			Health     json.RawMessage `json:"health"`
			Steps      []map[string]any
			Decision   map[string]any `json:"decision"`
		} `json:"remediation"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	rb := back.Remediation
	if rb.Policy == nil || len(rb.SelectedBy) != 1 || rb.Health == nil || len(rb.Steps) != 5 || rb.Decision["verdict"] != "Start" || rb.Decision["reason"] == nil {
		t.Errorf("json %s", js.String())
	}
	for _, k := range []string{"number", "action", "timeout", "state"} {
		if _, ok := rb.Steps[0][k]; !ok {
			t.Errorf("a step lacks %q: %v", k, rb.Steps[0])
		}
	}
}

func TestExplainNodeWithoutThePolicies(t *testing.T) {
	// Not installed: the API server's plain 404.
	cs := policyServer(t, http.NotFound, gpuNode("a", time.Hour))
	e, err := Node(context.Background(), cs, "a", options())
	if err != nil {
		t.Fatal(err)
	}
	if e.Remediation.State != "not-installed" || len(e.Warnings) != 0 {
		t.Errorf("remediation %+v warnings %v", e.Remediation, e.Warnings)
	}
	// A fake clientset has no REST client: as if not installed.
	if e := explainFor(t, "a", options(), gpuNode("a", time.Hour)); e.Remediation.State != "not-installed" {
		t.Errorf("fake clientset: %+v", e.Remediation)
	}
	// Forbidden: a warning, the rest answered.
	cs = policyServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"remediationpolicies.nodeshepherd.io is forbidden"}`))
	}, gpuNode("a", time.Hour))
	e, err = Node(context.Background(), cs, "a", options())
	if err != nil {
		t.Fatal(err)
	}
	if e.Remediation.State != "not-readable" || len(e.Warnings) != 1 || !strings.HasPrefix(e.Warnings[0], "cannot list RemediationPolicies") {
		t.Errorf("remediation %+v warnings %v", e.Remediation, e.Warnings)
	}
	// Any other error ends the answer.
	cs = policyServer(t, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusBadRequest) }, gpuNode("a", time.Hour))
	if _, err := Node(context.Background(), cs, "a", options()); err == nil || !strings.Contains(err.Error(), "listing RemediationPolicies") {
		t.Errorf("err %v", err)
	}
}
