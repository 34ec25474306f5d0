package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"

	remediationctl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// CloudProvider is what the configuration says of the --cloud-provider
// that the Reboot and Replace steps ask.
type CloudProvider struct {
	// Known: read from a configuration file. Without one, the flags
	// nodeshepherd runs with cannot be known here.
	Known bool
	// Name is --cloud-provider ("" none).
	Name string
	// Repairs: the provider reboots and replaces machines
	// (cloudprovider.Repairer). Fences: it powers them off, and it or the
	// fencing endpoint (--out-of-service-fencing-webhook-url) says they are
	// off: without it a policy with a Fence step is refused.
	Repairs, Fences bool
	// Note says what could not be told about it.
	Note string
}

// can is what the remediation controller could run with the provider. An
// unknown provider is taken to repair: explain then shows the ladder as it
// is with one, and says so.
func (c CloudProvider) can() rem.Capabilities {
	ok := !c.Known || c.Repairs
	return rem.Capabilities{Reboot: ok, Replace: ok, Fence: !c.Known || c.Fences}
}

// cannotFence words the refusal of a policy whose step i is a Fence, as
// the controller does.
func (c CloudProvider) cannotFence(i int) string {
	why := "no --cloud-provider is configured"
	if c.Name != "" {
		why = fmt.Sprintf("the cloud provider %q cannot power machines off (no PowerOff), or cannot say that a machine is off (no InstancesV2) and no fencing endpoint is configured", c.Name)
	}
	return fmt.Sprintf("step %d (Fence) needs a cloud provider that powers machines off, and an answer that the machine is off, "+
		"from that provider or from the fencing endpoint (--out-of-service-fencing-webhook-url), and %s", i+1, why)
}

// skip says why the controller skips a step of action a ("" it runs it).
func (c CloudProvider) skip(a rem.Action) string {
	if a != rem.ActionReboot && a != rem.ActionReplace || !c.Known || c.Repairs {
		return ""
	}
	if c.Name == "" {
		return "no cloud provider"
	}
	return fmt.Sprintf("the cloud provider %s cannot %s machines", c.Name, strings.ToLower(string(a)))
}

func (c CloudProvider) words() string {
	switch {
	case !c.Known:
		return "unknown (no --config file): Reboot and Replace steps run only if nodeshepherd runs with a --cloud-provider that repairs; shown as if it does"
	case c.Name == "":
		return "none (no --cloud-provider in the configuration): Reboot and Replace steps are skipped, and a policy with a Fence step is refused"
	case !c.Repairs && !c.Fences:
		return c.Name + ": it cannot reboot, replace or power off machines; Reboot and Replace steps are skipped, and a policy with a Fence step is refused"
	case !c.Repairs:
		return c.Name + ": it cannot reboot or replace machines; Reboot and Replace steps are skipped"
	case !c.Fences:
		return c.Name + ": it cannot power off machines; a policy with a Fence step is refused"
	case c.Note != "":
		return c.Name + ": " + c.Note
	}
	return c.Name + ": reboots, replaces and powers off machines"
}

// Remediation is the node's place under the RemediationPolicy resources
// (docs/remediation.md), as the remediation controller decides it from the
// same objects. Field names are stable: scripts read -o json.
type Remediation struct {
	// State is not-installed (no RemediationPolicy resource), not-readable
	// (no right to list them), none (no policy selects the node), conflict
	// (several do: none repairs it), healthy, pending (a condition holds,
	// not yet long enough), unhealthy (a repair starts at the controller's
	// next pass), blocked (a brake, a person's cordon or the pause holds
	// it back), in-repair, exhausted (the last step timed out), frozen (the
	// repair's policy is refused: it waits), ending (the repair's policy is
	// gone or no longer selects the node) or record-unreadable.
	State   string `json:"state"`
	Summary string `json:"summary"`
	// Policy is the policy the node is judged by.
	Policy string `json:"policy,omitempty"`
	// SelectedBy are the valid policies that select the node.
	SelectedBy []string `json:"selectedBy"`
	// Refused are the policies the controller does not act on, with why.
	Refused []RefusedPolicy `json:"refused,omitempty"`
	Paused  bool            `json:"paused,omitempty"`
	// HealthyHold is the policy's hold time: a step is done, and a repair
	// ends, once the node is healthy this long.
	HealthyHold   string `json:"healthyHold,omitempty"`
	CloudProvider string `json:"cloudProvider"`
	// Record is the node's repair record (annotation
	// nodeshepherd.io/remediation), when it has a readable one.
	Record   *RepairRecord        `json:"record,omitempty"`
	Health   *RemediationHealth   `json:"health,omitempty"`
	Steps    []LadderStep         `json:"steps,omitempty"`
	Pool     *RemediationPool     `json:"pool,omitempty"`
	Decision *RemediationDecision `json:"decision,omitempty"`
}

// RefusedPolicy is a policy the controller refuses (invalid or unreadable).
type RefusedPolicy struct {
	Name string `json:"name"`
	Why  string `json:"why"`
}

// RepairRecord is the node's repair record.
type RepairRecord struct {
	Policy string    `json:"policy"`
	Step   int       `json:"step"` // from 1
	Action string    `json:"action"`
	Since  time.Time `json:"since"`
}

// RemediationHealth is the node's health under the policy's conditions.
type RemediationHealth struct {
	// State is healthy, pending (a condition holds, not long enough yet)
	// or unhealthy.
	State string     `json:"state"`
	Why   string     `json:"why,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	// PendingUntil is when a condition that holds now counts.
	PendingUntil *time.Time `json:"pendingUntil,omitempty"`
}

// LadderStep is one step of the policy's ladder for this node.
type LadderStep struct {
	Number  int    `json:"number"` // from 1
	Action  string `json:"action"`
	Timeout string `json:"timeout"`
	Taint   string `json:"taint,omitempty"`
	// State is passed, current, pending or skipped.
	State string `json:"state"`
	// Why says why a step is skipped, or what a pending one depends on.
	Why string `json:"why,omitempty"`
	// Since is when the current step started; NextAt when it times out
	// and Next what then comes, unless the node is healthy for the hold
	// time by then.
	Since  *time.Time `json:"since,omitempty"`
	NextAt *time.Time `json:"nextAt,omitempty"`
	Next   string     `json:"next,omitempty"`
}

// RemediationPool counts the policy's nodes for its brakes.
type RemediationPool struct {
	Name         string `json:"name"`
	Nodes        int    `json:"nodes"`
	Unhealthy    int    `json:"unhealthy"`
	InRepair     int    `json:"inRepair"`
	Zone         string `json:"zone"`
	ZoneNodes    int    `json:"zoneNodes"`
	ZoneInRepair int    `json:"zoneInRepair"`
}

// RemediationDecision is the policy's decision for the node now.
type RemediationDecision struct {
	// Verdict is None, Start, Advance, Done, Blocked or Exhausted.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// Step is the step to run (Start, Advance) or under way, from 1.
	Step    int      `json:"step,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
	// Next is when the decision may change without a change of the node.
	Next *time.Time `json:"next,omitempty"`
}

// policy is one RemediationPolicy as the controller takes it.
type policy struct {
	name string
	spec rem.PolicySpec
	// paused: spec.paused or the policy's pause annotation.
	paused bool
	// refused says why the controller does not act on it ("" it does).
	refused string
}

// policyOf validates p as the controller does.
func policyOf(p *rem.RemediationPolicy) policy {
	out := policy{name: p.Name, spec: p.Spec, paused: p.Spec.Paused || p.Annotations[remediationctl.AnnotationPaused] == "true"}
	if errs := p.Spec.Validate(field.NewPath("spec")); len(errs) > 0 {
		out.refused = errs.ToAggregate().Error()
	}
	return out
}

// policies are the RemediationPolicies read.
type policies struct {
	// missing: the resource is not served (the CRD is not installed);
	// unreadable: listing it was forbidden (a warning says so).
	missing, unreadable bool
	items               []policy
}

// readPolicies lists the RemediationPolicies. The clientset's discovery
// REST client reaches any path of the API server with the user's
// credentials, so explain needs no dynamic client for them; a fake
// clientset has none and serves no custom resource: as if not installed.
func readPolicies(ctx context.Context, cs kubernetes.Interface, warnings *[]string) (policies, error) {
	rc := cs.Discovery().RESTClient()
	if rc == nil {
		return policies{missing: true}, nil
	}
	// JSON whatever the client prefers: custom resources have no protobuf.
	raw, err := rc.Get().AbsPath("/apis", rem.Group, rem.Version, rem.Resource).SetHeader("Accept", "application/json").DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return policies{missing: true}, nil
	}
	if ok, err := optionalList(err, "RemediationPolicies", "the remediation section is not shown", warnings); err != nil {
		return policies{}, err
	} else if !ok {
		return policies{unreadable: true}, nil
	}
	return decodePolicies(raw)
}

// decodePolicies reads a RemediationPolicyList. An item that does not
// decode is refused by the controller too, so it is shown refused here
// rather than ending the answer.
func decodePolicies(raw []byte) (policies, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return policies{}, fmt.Errorf("reading the list of RemediationPolicies: %w", err)
	}
	var out policies
	for _, item := range list.Items {
		var p rem.RemediationPolicy
		if err := json.Unmarshal(item, &p); err != nil {
			var meta metav1.PartialObjectMetadata
			_ = json.Unmarshal(item, &meta) // the name, if that much reads
			out.items = append(out.items, policy{name: meta.Name, refused: "unreadable: " + err.Error()})
			continue
		}
		out.items = append(out.items, policyOf(&p))
	}
	sort.Slice(out.items, func(i, j int) bool { return out.items[i].name < out.items[j].name })
	return out, nil
}

// remediationOf judges the node under the policies as the remediation
// controller does (pkg/controller/remediation: sync and decide); it is
// pure. What explain cannot see is the controller's memory: the end of the
// last storm (for the cooldown brake), taken as never.
func remediationOf(n *v1.Node, nodes []*v1.Node, pols policies, cloud CloudProvider, now time.Time, warnings *[]string) Remediation {
	r := Remediation{SelectedBy: []string{}, CloudProvider: cloud.words()}
	req, inRepair, recErr := rem.RequestOf(n)
	if recErr != nil {
		*warnings = append(*warnings, recErr.Error()+": the remediation controller does not act on the node until the record is fixed or removed")
	}
	recordWords := ""
	if inRepair {
		r.Record = &RepairRecord{Policy: req.Policy, Step: req.Step + 1, Action: string(req.Action), Since: req.Since}
		recordWords = fmt.Sprintf("; the node carries a repair record of policy %s (step %d, %s, since %s)", req.Policy, req.Step+1, req.Action, stamp(req.Since))
	}
	switch {
	case pols.missing:
		r.State, r.Summary = "not-installed", "no RemediationPolicy resource (CRD not installed)"+recordWords
		return r
	case pols.unreadable:
		r.State, r.Summary = "not-readable", "the RemediationPolicies could not be listed (see the warnings)"+recordWords
		return r
	}
	byName := map[string]*policy{}
	var selected []*policy
	for i := range pols.items {
		p := &pols.items[i]
		byName[p.name] = p
		if j, no := p.spec.FenceRefusal(cloud.can()); p.refused == "" && no {
			p.refused = cloud.cannotFence(j) // as the controller refuses it (CannotFence)
		}
		switch {
		case p.refused != "":
			r.Refused = append(r.Refused, RefusedPolicy{Name: p.name, Why: p.refused})
		case p.spec.Selects(n):
			selected = append(selected, p)
			r.SelectedBy = append(r.SelectedBy, p.name)
		}
	}
	// By name, as the controller names them.
	sort.Slice(selected, func(i, j int) bool { return selected[i].name < selected[j].name })
	sort.Strings(r.SelectedBy)
	var p *policy
	switch {
	case recErr != nil:
		// The controller leaves the node; the ladder of the one policy
		// that selects it, if any, is still worth showing.
		if len(selected) == 1 {
			r.policyLadder(selected[0], n, nodes, rem.NotInRepair, cloud, now)
		}
		r.unreadable(recErr)
		return r
	case inRepair:
		// A repair belongs to its policy, whichever others select the node.
		p = byName[req.Policy]
		switch {
		case p == nil:
			r.State, r.Summary = "ending", fmt.Sprintf("in repair at step %d (%s) under policy %s, which no longer exists: the controller ends the repair at its next pass (its taints lifted, the record removed)", req.Step+1, req.Action, req.Policy)
			return r
		case p.refused != "":
			r.Policy = p.name
			r.State, r.Summary = "frozen", fmt.Sprintf("in repair at step %d (%s) under policy %s, which is refused: the repair waits until the policy is valid again", req.Step+1, req.Action, p.name)
			return r
		case !p.spec.Selects(n):
			r.Policy = p.name
			r.State, r.Summary = "ending", fmt.Sprintf("in repair at step %d (%s) under policy %s, which no longer selects the node: the controller ends the repair at its next pass (its taints lifted, the record removed)", req.Step+1, req.Action, p.name)
			return r
		}
	case len(selected) == 0:
		r.State, r.Summary = "none", "no policy selects this node"
		return r
	case len(selected) > 1:
		// The controller refuses overlaps per node.
		r.State, r.Summary = "conflict", fmt.Sprintf("selected by %d policies (%s): none repairs it", len(selected), strings.Join(r.SelectedBy, ", "))
		return r
	default:
		p = selected[0]
	}
	st, err := rem.ReadState(n, p.name, len(p.spec.Steps))
	if err != nil { // a record beyond the policy's ladder
		*warnings = append(*warnings, err.Error()+": the remediation controller does not act on the node until the record is fixed or removed")
		r.policyLadder(p, n, nodes, rem.NotInRepair, cloud, now)
		r.unreadable(err)
		return r
	}
	d := r.policyLadder(p, n, nodes, st, cloud, now)
	r.summarize(p, st, d)
	return r
}

// unreadable says the controller leaves a node whose record it cannot
// read (its event says Blocked).
func (r *Remediation) unreadable(err error) {
	r.State = "record-unreadable"
	r.Summary = fmt.Sprintf("the repair record (annotation %s) is unreadable: the controller does not act on the node", rem.AnnotationState)
	r.Decision = &RemediationDecision{Verdict: string(rem.VerdictBlocked), Reason: "repair record unreadable, not acting on the node: " + err.Error()}
}

// policyLadder fills in the node's health, ladder, pool and decision
// under p for a node at st, the pool counted over nodes.
func (r *Remediation) policyLadder(p *policy, n *v1.Node, nodes []*v1.Node, st rem.State, cloud CloudProvider, now time.Time) rem.Decision {
	r.Policy, r.Paused, r.HealthyHold = p.name, p.paused, p.spec.HealthyHold.Duration.String()
	h := p.spec.Judge(n, now)
	r.Health = &RemediationHealth{State: "healthy", Since: ptrTime(h.Since)}
	switch {
	case h.Unhealthy:
		r.Health.State, r.Health.Why = "unhealthy", h.Why
	case !h.Pending.IsZero():
		r.Health.State, r.Health.PendingUntil = "pending", ptrTime(h.Pending)
		r.Health.Why = "a condition holds, not long enough yet: unhealthy at " + stamp(h.Pending) + " if it still holds"
	}
	zone := n.Labels[v1.LabelTopologyZone]
	// As the controller counts: any repair record, or an unreadable one,
	// is a repair (it must not start a second over one it cannot read).
	pool := p.spec.PoolOf(p.name, zone, nodes, func(m *v1.Node) bool {
		_, ok, err := rem.RequestOf(m)
		return ok || err != nil
	}, now)
	r.Pool = &RemediationPool{Name: pool.Name, Nodes: pool.Nodes, Unhealthy: pool.Unhealthy, InRepair: pool.InRepair,
		Zone: pool.Zone, ZoneNodes: pool.ZoneNodes, ZoneInRepair: pool.ZoneInRepair}
	// A cordon with nodeshepherd's owner record is the drain controller's
	// (for a rule or for this repair); any other is a person's.
	_, ours := owner.Of(n, owner.Cordon)
	d := p.spec.Decide(rem.Input{Node: n, State: st, Pool: pool, Now: now, Paused: p.paused, Can: cloud.can(),
		CordonedByOther: n.Spec.Unschedulable && !ours && st.Step < 0})
	r.Decision = &RemediationDecision{Verdict: string(d.Verdict), Reason: d.Reason, Skipped: d.Skipped, Next: ptrTime(d.Next)}
	if d.Step >= 0 {
		r.Decision.Step = d.Step + 1
	}
	r.Steps = make([]LadderStep, len(p.spec.Steps))
	for i, s := range p.spec.Steps {
		ls := LadderStep{Number: i + 1, Action: string(s.Action), Timeout: s.Timeout.Duration.String(), State: "pending"}
		if s.Taint != nil {
			ls.Taint = s.Taint.Key
			if s.Taint.Value != "" {
				ls.Taint += "=" + s.Taint.Value
			}
			ls.Taint += ":" + string(s.Taint.Effect)
		}
		skip := cloud.skip(s.Action)
		switch {
		case i == st.Step:
			ls.State, ls.Since = "current", ptrTime(st.StepSince)
			ls.NextAt, ls.Next = nextStep(p, i, st.StepSince, d.Verdict, cloud)
		case skip != "":
			ls.State, ls.Why = "skipped", skip
		case i < st.Step:
			ls.State = "passed"
		case (s.Action == rem.ActionReboot || s.Action == rem.ActionReplace) && !cloud.Known:
			ls.Why = "runs only with a --cloud-provider (unknown without --config)"
		}
		r.Steps[i] = ls
	}
	return d
}

// nextStep is when step i, started at since, times out and what comes then:
// the next step the controller can run, or a person after the last.
func nextStep(p *policy, i int, since time.Time, v rem.Verdict, cloud CloudProvider) (*time.Time, string) {
	if v == rem.VerdictExhausted {
		return nil, "none: the last step timed out; a person decides"
	}
	at := since.Add(p.spec.Steps[i].Timeout.Duration)
	for j := i + 1; j < len(p.spec.Steps); j++ {
		if cloud.skip(p.spec.Steps[j].Action) == "" {
			return &at, fmt.Sprintf("step %d (%s)", j+1, p.spec.Steps[j].Action)
		}
	}
	return &at, "a person is asked (the last step)"
}

// summarize words the decision for the node at st.
func (r *Remediation) summarize(p *policy, st rem.State, d rem.Decision) {
	step := func(i int) string { return fmt.Sprintf("step %d (%s)", i+1, p.spec.Steps[i].Action) }
	if st.Step < 0 {
		switch d.Verdict {
		case rem.VerdictStart:
			r.State, r.Summary = "unhealthy", fmt.Sprintf("unhealthy under policy %s: the controller starts %s at its next pass", p.name, step(d.Step))
		case rem.VerdictBlocked:
			r.State, r.Summary = "blocked", fmt.Sprintf("unhealthy under policy %s; %s", p.name, d.Reason)
		case rem.VerdictNone:
			r.State, r.Summary = "healthy", "healthy under policy "+p.name
			if r.Health.PendingUntil != nil {
				r.State, r.Summary = "pending", fmt.Sprintf("healthy under policy %s; %s", p.name, r.Health.Why)
			}
		}
		return
	}
	in := fmt.Sprintf("in repair under policy %s at %s since %s", p.name, step(st.Step), stamp(st.StepSince))
	r.State, r.Summary = "in-repair", in
	switch d.Verdict {
	case rem.VerdictNone:
		if r.Health.State == "healthy" && !d.Next.IsZero() {
			r.Summary += fmt.Sprintf("; %s: the repair ends at %s if it stays so", d.Reason, stamp(d.Next))
		}
	case rem.VerdictAdvance:
		r.Summary += fmt.Sprintf("; it timed out: the controller climbs to %s at its next pass", step(d.Step))
	case rem.VerdictDone:
		r.Summary += fmt.Sprintf("; healthy for the hold time (%v): the controller ends the repair at its next pass", p.spec.HealthyHold.Duration)
	case rem.VerdictBlocked:
		r.State, r.Summary = "blocked", in+"; "+d.Reason
	case rem.VerdictExhausted:
		r.State, r.Summary = "exhausted", in+"; the last step timed out: the node waits for a person"
	}
}

// writeTable prints the section for people: the policies, the node's
// health, the ladder, then the pool and the decision; at prints a time.
func (r *Remediation) writeTable(w io.Writer, at func(time.Time) string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("")
	p("Remediation:\t%s: %s", r.State, r.Summary)
	if r.State == "not-installed" || r.State == "not-readable" {
		tw.Flush()
		return
	}
	if len(r.SelectedBy) > 0 {
		p("  Selected by:\t%s", strings.Join(r.SelectedBy, ", "))
	}
	for _, rp := range r.Refused {
		p("  Refused policy:\t%s: %s", dash(rp.Name), rp.Why)
	}
	if rec := r.Record; rec != nil && len(r.Steps) == 0 { // else the ladder's current step
		p("  Repair record:\tpolicy %s, step %d (%s) since %s", rec.Policy, rec.Step, rec.Action, at(rec.Since))
	}
	if h := r.Health; h != nil {
		health := h.State
		if h.Since != nil && h.State != "pending" {
			health += " since " + at(*h.Since)
		}
		if h.Why != "" {
			health += ": " + h.Why
		}
		p("  Health:\t%s", health)
	}
	if r.Steps != nil {
		p("  Cloud provider:\t%s", r.CloudProvider)
	}
	tw.Flush()
	if len(r.Steps) > 0 {
		paused := ""
		if r.Paused {
			paused = "; paused: no new repair and no new step"
		}
		fmt.Fprintf(w, "  Ladder (policy %s, healthy hold %s%s):\n", r.Policy, r.HealthyHold, paused)
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "    STEP\tACTION\tTIMEOUT\tSTATE\tDETAIL")
		for _, s := range r.Steps {
			state, detail := s.State, s.Taint
			switch {
			case s.State == "skipped":
				state += ": " + s.Why
			case s.Why != "":
				detail = strings.TrimPrefix(detail+"; "+s.Why, "; ")
			}
			if s.State == "current" && s.Since != nil {
				detail = strings.TrimPrefix(detail+"; since "+at(*s.Since), "; ")
				if s.NextAt != nil {
					detail += fmt.Sprintf("; next: %s at %s unless healthy for %s", s.Next, at(*s.NextAt), r.HealthyHold)
				} else {
					detail += "; next: " + s.Next
				}
			}
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\n", s.Number, s.Action, s.Timeout, state, dash(detail))
		}
		tw.Flush()
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if pool := r.Pool; pool != nil {
		p("  Pool:\t%s: %d nodes, %d unhealthy, %d in repair; zone %q: %d nodes, %d in repair", pool.Name, pool.Nodes, pool.Unhealthy, pool.InRepair,
			pool.Zone, pool.ZoneNodes, pool.ZoneInRepair)
	}
	if d := r.Decision; d != nil {
		p("  Decision:\t%s: %s", d.Verdict, d.Reason)
		for _, s := range d.Skipped {
			p("\tskips %s", s)
		}
	}
	tw.Flush()
}
