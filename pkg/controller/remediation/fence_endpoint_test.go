package remediation

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// fencingURL names the fake fencing endpoint in messages.
const fencingURL = "https://fence.example"

// fakeEndpoint is a fencing endpoint answering from the same table as
// fakeInstances: "off" (powered off), "error"; else running. It records the
// deadline of each question's context.
type fakeEndpoint struct{ fakeInstances }

func newFakeEndpoint() *fakeEndpoint {
	return &fakeEndpoint{fakeInstances{machines: map[string]string{}}}
}

func (f *fakeEndpoint) PoweredOff(ctx context.Context, n *v1.Node) (bool, error) {
	s, err := f.state(ctx, n)
	return s == "off", err
}

// withEndpoint gives the controller the fencing endpoint ep.
func withEndpoint(ep *fakeEndpoint) func(*Deps) {
	return func(d *Deps) { d.Fencing, d.FencingName = ep, fencingURL }
}

// fenceController builds a controller from d with fake clients.
func fenceController(t *testing.T, d Deps) *Controller {
	t.Helper()
	client := fake.NewClientset()
	d.Client, d.Nodes, d.Clock = client, informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes(), clocktesting.NewFakeClock(t0)
	d.Dynamic = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
	c, err := New(Config{}, d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 46: a Fence is confirmed by the provider's InstancesV2 or by the
// fencing endpoint's PoweredOff. power combines their answers: any answer
// that the machine runs is a veto (PowerOn), else any answer that it is off
// confirms (PowerOff); errors are no answer, and an absent provider or
// endpoint is not asked. The words name who gave the answer.
func TestFencePowerCombinesAnswers(t *testing.T) {
	provider, endpoint := "the cloud provider", "the fencing endpoint "+fencingURL
	for _, tc := range []struct {
		name              string
		provider, fencing string // "" running, "off", "gone", "error", "absent"
		want              rem.Power
		by                []string
	}{
		{"provider off, endpoint running: vetoed", "off", "", rem.PowerOn, []string{endpoint}},
		{"provider gone, endpoint running: vetoed", "gone", "", rem.PowerOn, []string{endpoint}},
		{"provider running, endpoint off: vetoed", "", "off", rem.PowerOn, []string{provider}},
		{"provider unknown, endpoint off", "error", "off", rem.PowerOff, []string{endpoint}},
		{"provider absent, endpoint off", "absent", "off", rem.PowerOff, []string{endpoint}},
		{"provider absent, endpoint running", "absent", "", rem.PowerOn, []string{endpoint}},
		{"provider off, endpoint unknown", "off", "error", rem.PowerOff, []string{provider}},
		{"provider off, endpoint absent", "off", "absent", rem.PowerOff, []string{provider}},
		{"both off", "off", "off", rem.PowerOff, []string{provider, endpoint}},
		{"both unknown", "error", "error", rem.PowerUnknown, []string{provider, endpoint}},
		{"provider absent, endpoint unknown", "absent", "error", rem.PowerUnknown, []string{endpoint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst, ep := &fakeInstances{machines: map[string]string{"n": tc.provider}}, newFakeEndpoint()
			ep.set("n", tc.fencing)
			d := Deps{Fencer: &fakeRepairer{}, Instances: inst, Fencing: ep, FencingName: fencingURL}
			if tc.provider == "absent" {
				d.Instances = nil
			}
			if tc.fencing == "absent" {
				d.Fencing = nil
			}
			c := fenceController(t, d)
			p, by := c.power(t.Context(), deadlocked("n", "b1"))
			if p != tc.want || !slices.Equal(by, tc.by) {
				t.Fatalf("power %v by %q, want %v by %q", p, by, tc.want, tc.by)
			}
			// Each question bounded like a request; an absent one not asked.
			for _, d := range append(inst.deadlines, ep.deadlines...) {
				if d <= 0 || d > providerTimeout {
					t.Errorf("question deadlines %v %v, want each within %v", inst.deadlines, ep.deadlines, providerTimeout)
				}
			}
			if tc.fencing == "absent" && len(ep.deadlines) != 0 || tc.provider == "absent" && len(inst.deadlines) != 0 {
				t.Errorf("an absent one was asked: %v %v", inst.deadlines, ep.deadlines)
			}
		})
	}
}

// Issue 46: a Fence step is possible with someone to power the machine off
// (the provider's PowerOff) and at least one to confirm it (the provider's
// InstancesV2 or the fencing endpoint); a policy with one is refused
// otherwise, saying what is missing.
func TestFenceCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		fencer, instances, ep bool
		cloud                 string
		can                   bool
		says                  string
	}{
		{"PowerOff and InstancesV2", true, true, false, "acme", true, ""},
		{"PowerOff and the fencing endpoint", true, false, true, "acme", true, ""},
		{"PowerOff and both", true, true, true, "acme", true, ""},
		{"PowerOff alone", true, false, false, "acme", false, `the cloud provider "acme" cannot say that a machine is off (it has no InstancesV2), and no fencing endpoint is configured`},
		{"confirmers without PowerOff", false, true, true, "acme", false, `the cloud provider "acme" cannot power machines off`},
		{"the fencing endpoint alone", false, false, true, "", false, "no --cloud-provider is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Deps{CloudName: tc.cloud}
			if tc.fencer {
				d.Fencer = &fakeRepairer{}
			}
			if tc.instances {
				d.Instances = &fakeInstances{machines: map[string]string{}}
			}
			if tc.ep {
				d.Fencing, d.FencingName = newFakeEndpoint(), fencingURL
			}
			c := fenceController(t, d)
			if got := c.can().Fence; got != tc.can {
				t.Fatalf("can fence %v, want %v", got, tc.can)
			}
			c.onPolicy(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicy",
				"metadata": map[string]any{"name": "gpu"}, "spec": fencePolicy}}, false)
			p := c.policy("gpu")
			switch {
			case tc.can && p.refused != "":
				t.Errorf("refused: %s", p.refused)
			case !tc.can && (p.refusedReason != ReasonCannotFence || !strings.Contains(p.refused, tc.says) ||
				!strings.Contains(p.refused, "the fencing endpoint (--out-of-service-fencing-webhook-url)")):
				t.Errorf("refused %q (%s), want %s saying %q and naming the fencing endpoint", p.refused, p.refusedReason, ReasonCannotFence, tc.says)
			}
		})
	}
}

// Issue 46: with the provider blind (its questions fail) the fencing
// endpoint's "powered off" confirms the Fence: the record's FenceBootID is
// written, and the event names the endpoint, not the provider. Until it
// answers, nothing is decided, and the words say who could not.
func TestFenceConfirmedByTheFencingEndpoint(t *testing.T) {
	r, ep := &fakeRepairer{}, newFakeEndpoint()
	h := newHarnessWith(t, r, withEndpoint(ep), fencePolicy, deadlocked("n", "b1"))
	h.inst.set("n", "error")
	ep.set("n", "error")
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.Action != rem.ActionFence || rec.FenceBootID != "" {
		t.Fatalf("confirmed without an answer: %+v", rec)
	}
	if w := h.c.fenceWords("n"); w != "requested: the cloud provider and the fencing endpoint "+fencingURL+" could not say whether the machine is off" {
		t.Errorf("fence words %q", w)
	}
	h.update(t, h.node(t, "n"))
	ep.set("n", "off")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.FenceBootID != "b1" {
		t.Fatalf("not confirmed by the endpoint: %+v", rec)
	}
	var confirmed []string
	for _, e := range h.events(EventStep) {
		if strings.Contains(e, "powered off") {
			confirmed = append(confirmed, e)
		}
	}
	if len(confirmed) != 1 || !strings.Contains(confirmed[0], "the fencing endpoint "+fencingURL+" answers that the machine of node n is off") ||
		strings.Contains(confirmed[0], "cloud provider answer") {
		t.Errorf("confirmation events %q", confirmed)
	}
	if len(r.ids) != 1 {
		t.Errorf("requests %v, want one", r.ids)
	}
	for _, d := range ep.deadlines {
		if d <= 0 || d > providerTimeout {
			t.Errorf("endpoint deadlines %v, want each within %v", ep.deadlines, providerTimeout)
		}
	}
}

// Issue 46: a fencing endpoint that answers the machine runs vetoes the
// Fence although the provider answers it off (one of them is wrong, and a
// wrong "off" would force-delete a running machine's pods): FenceVetoed
// after the settle time, naming the endpoint, no confirmation. Once the
// endpoint answers it off too, the Fence is confirmed by both.
func TestFenceVetoedByTheFencingEndpoint(t *testing.T) {
	ep := newFakeEndpoint()
	h := newHarnessWith(t, &fakeRepairer{}, withEndpoint(ep), fencePolicy, deadlocked("n", "b1"))
	h.inst.set("n", "off")
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	h.update(t, h.node(t, "n"))
	h.clk.Step(31 * time.Second) // past the settle time (30s)
	for range 2 {
		if err := h.c.sync(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	}
	if ev := h.events(EventFenceVetoed); len(ev) != 1 || !strings.Contains(ev[0], "the fencing endpoint "+fencingURL+" answers that the machine of node n runs") {
		t.Fatalf("veto events %q, want one naming the endpoint", ev)
	}
	if rec := h.record(t); rec.FenceBootID != "" {
		t.Fatalf("confirmed while the endpoint answers running: %+v", rec)
	}
	ep.set("n", "off")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.FenceBootID != "b1" {
		t.Fatalf("not confirmed once both answer off: %+v", rec)
	}
	if ev := h.events(EventStep); len(ev) != 1 || !strings.Contains(ev[0], "the cloud provider and the fencing endpoint "+fencingURL+" answer that the machine of node n is off") {
		t.Errorf("step events %q", ev)
	}
}
