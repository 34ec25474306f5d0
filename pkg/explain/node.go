package explain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/node/topology"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/budget"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/tainteviction"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// NodeOptions are the settings a node is judged against (nodeshepherd's
// configuration, or its defaults), complete with the shared settings.
type NodeOptions struct {
	// Source says where the settings come from: "defaults" or "file PATH".
	Source        string
	NodeLifecycle nodelifecycle.Config
	Drain         drain.Config
	// Cloud is the cloud provider the remediation ladder's Reboot and
	// Replace steps ask.
	Cloud CloudProvider
	// Now is the time of the judgment; nil means the wall clock.
	Now func() time.Time
}

// Judgments of a node's health.
const (
	JudgmentHealthy  = "Healthy"
	JudgmentOverdue  = "Overdue"
	JudgmentStarting = "Starting"
	JudgmentUnknown  = "Unknown"
	JudgmentNotReady = "NotReady"
)

// Eviction verdicts for a pod on a node with NoExecute taints.
const (
	EvictNow     = "now"
	EvictAt      = "at"
	EvictNever   = "tolerates-forever"
	EvictNoTaint = "no-noexecute-taint"
	EvictGoing   = "terminating"
)

// NodeExplanation is what nodeshepherd sees about one node. Field names are
// stable: scripts read -o json.
type NodeExplanation struct {
	Name         string          `json:"name"`
	Now          time.Time       `json:"now"`
	Settings     Settings        `json:"settings"`
	Heartbeats   Heartbeats      `json:"heartbeats"`
	Health       Health          `json:"health"`
	Zone         Zone            `json:"zone"`
	Taints       []Taint         `json:"taints"`
	Evictions    []PodEviction   `json:"evictions"`
	Drain        DrainState      `json:"drain"`
	OutOfService OutOfServiceSet `json:"outOfService"`
	Remediation  Remediation     `json:"remediation"`
	// Warnings say what could not be read, and what is missing for it.
	Warnings []string `json:"warnings,omitempty"`
}

// Settings are the settings used, as the configuration file names them.
type Settings struct {
	Source                 string   `json:"source"`
	NodeMonitorGracePeriod string   `json:"nodeMonitorGracePeriod"`
	NodeStartupGracePeriod string   `json:"nodeStartupGracePeriod"`
	UnhealthyZoneThreshold float32  `json:"unhealthyZoneThreshold"`
	DrainConditions        []string `json:"drainConditions,omitempty"`
	MaxConcurrentDrains    int      `json:"maxConcurrentDrains"`
	MaxCordonedNodes       string   `json:"maxCordonedNodes"`
	GroupByLabel           string   `json:"groupByLabel,omitempty"`
	DrainBuffer            string   `json:"drainBuffer"`
	MaxUnhealthyNodes      string   `json:"maxUnhealthyNodes"`
}

// Heartbeat is one heartbeat source's last beat.
type Heartbeat struct {
	Time time.Time `json:"time"`
	Age  string    `json:"age"`
}

// Heartbeats are the node's last heartbeats against its grace period.
type Heartbeats struct {
	// NodeStatus is the Ready condition's lastHeartbeatTime.
	NodeStatus *Heartbeat `json:"nodeStatus,omitempty"`
	// Lease is kube-node-lease/NAME's renewTime.
	Lease *Heartbeat `json:"lease,omitempty"`
	// Grace is the grace period that applies; GraceSetting names it
	// (nodeMonitorGracePeriod, or nodeStartupGracePeriod before the first
	// Ready condition, counted from the node's creation).
	Grace        string `json:"grace"`
	GraceSetting string `json:"graceSetting"`
	// Deadline is when the node is marked Unknown if nothing is heard.
	Deadline time.Time `json:"deadline"`
}

// Health is the judgment on the node's health.
type Health struct {
	// Judgment is Healthy, Overdue (silent past its grace: marked Unknown
	// at the next check), Starting (no Ready condition yet, within the
	// startup grace), Unknown or NotReady.
	Judgment string `json:"judgment"`
	// Ready is the Ready condition's status; Since its lastTransitionTime.
	Ready   string     `json:"ready,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Message string     `json:"message"`
	// MarkedBy is the field manager that last wrote Ready's status.
	MarkedBy string `json:"markedBy,omitempty"`
}

// Zone is the node's zone and that zone's disruption state.
type Zone struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Nodes    int    `json:"nodes"`
	NotReady int    `json:"notReady"`
	// Excluded: the node carries node.kubernetes.io/exclude-disruption and
	// does not count in its zone's state.
	Excluded bool `json:"excluded,omitempty"`
}

// Taint is one taint with who set it, why and since when.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// SetBy is the field manager that last wrote the node's taint list
	// (managedFields hold the list as one field).
	SetBy string `json:"setBy,omitempty"`
	// Owner is nodeshepherd's owner record of the taint (annotation
	// nodeshepherd.io/owners); nil: not nodeshepherd's, it leaves it.
	Owner *owner.Record `json:"owner,omitempty"`
	Why   string        `json:"why,omitempty"`
	Since *time.Time    `json:"since,omitempty"`
	// SinceFrom is timeAdded, or managedFields (when the taint list was
	// last written) for taints without timeAdded.
	SinceFrom string `json:"sinceFrom,omitempty"`
}

// PodEviction is when a pod on the node is evicted by its NoExecute taints.
type PodEviction struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Eviction is now, at, tolerates-forever, no-noexecute-taint or
	// terminating (already being deleted).
	Eviction string     `json:"eviction"`
	At       *time.Time `json:"at,omitempty"`
	// Taint is the taint that evicts it (key:effect).
	Taint             string `json:"taint,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
	Note              string `json:"note,omitempty"`
}

// Verdict is a drain budget's answer for the node's next step.
type Verdict struct {
	Action  string     `json:"action"` // cordon or drain
	Allowed bool       `json:"allowed"`
	Budget  string     `json:"budget,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// Blocker is a pod whose eviction a PodDisruptionBudget refuses.
type Blocker struct {
	Pod                 string `json:"pod"`
	PodDisruptionBudget string `json:"podDisruptionBudget"`
	DisruptionsAllowed  int32  `json:"disruptionsAllowed"`
	CurrentHealthy      int32  `json:"currentHealthy"`
	DesiredHealthy      int32  `json:"desiredHealthy"`
	ExpectedPods        int32  `json:"expectedPods"`
	Why                 string `json:"why"`
}

// DrainState is the drain controller's state and next step for the node.
type DrainState struct {
	// Configured: drain rules are given in the settings.
	Configured bool `json:"configured"`
	// Selected: the rules' node selection takes the node.
	Selected bool `json:"selected"`
	// State is not-configured, not-selected, none (no rule matches),
	// pending (a condition holds, not yet long enough), waiting (a budget
	// or the maintenance windows hold it back), cordoned, draining,
	// completed, failed, or left-to-human (cordoned by someone else).
	State   string   `json:"state"`
	Summary string   `json:"summary"`
	Matched []string `json:"matched,omitempty"`
	// MatchedSince is when the first matched condition took its status.
	MatchedSince *time.Time `json:"matchedSince,omitempty"`
	PendingUntil *time.Time `json:"pendingUntil,omitempty"`
	Cordoned     bool       `json:"cordoned"`
	// CordonedBy is the field manager that last wrote spec.unschedulable.
	CordonedBy string `json:"cordonedBy,omitempty"`
	// CordonedByDrain: nodeshepherd's drain controller owns the cordon
	// (annotation nodeshepherd.io/drain-conditions).
	CordonedByDrain bool `json:"cordonedByDrain"`
	// CordonedAt is when the drain controller cordoned the node
	// (nodeshepherd.io/drain-cordoned-at).
	CordonedAt *time.Time `json:"cordonedAt,omitempty"`
	// CordonOwner is nodeshepherd's owner record of the cordon (annotation
	// nodeshepherd.io/owners); nil: the cordon is someone else's.
	CordonOwner    *owner.Record `json:"cordonOwner,omitempty"`
	Conditions     string        `json:"conditions,omitempty"`
	ScheduledAt    *time.Time    `json:"scheduledAt,omitempty"`
	FinishedAt     *time.Time    `json:"finishedAt,omitempty"`
	Message        string        `json:"message,omitempty"`
	Attempts       int           `json:"attempts,omitempty"`
	RetryRequested bool          `json:"retryRequested,omitempty"`
	RetryAt        *time.Time    `json:"retryAt,omitempty"`
	BlockedSince   *time.Time    `json:"blockedSince,omitempty"`
	Budget         *Verdict      `json:"budget,omitempty"`
	Blockers       []Blocker     `json:"blockers,omitempty"`
	// MoveBeforeEvict is --drain-move-before-evict (Namespaces and
	// Deployments may say otherwise); Moves the moves in flight off the node.
	MoveBeforeEvict bool         `json:"moveBeforeEvict"`
	Moves           []drain.Move `json:"moves,omitempty"`
}

// OutOfServiceSet is the node's out-of-service state.
type OutOfServiceSet struct {
	// State is in-service, out-of-service or confirmed (a person's
	// confirmation, not acted on yet).
	State string `json:"state"`
	// Taint is node.kubernetes.io/out-of-service's value:effect, if set.
	Taint string     `json:"taint,omitempty"`
	SetBy string     `json:"setBy,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	// Confirmation is nodeshepherd.io/out-of-service (a person's word).
	Confirmation *string `json:"confirmation,omitempty"`
	// ConfirmationBootID is the boot the confirmation was given for
	// (nodeshepherd.io/out-of-service-confirmation-boot-id); "" until the
	// controller has recorded it.
	ConfirmationBootID string `json:"confirmationBootID,omitempty"`
	// NodeBootID is the boot the node reports now.
	NodeBootID  string `json:"nodeBootID,omitempty"`
	BootID      string `json:"bootID,omitempty"`
	ConfirmedBy string `json:"confirmedBy,omitempty"`
	Summary     string `json:"summary"`
}

var (
	taintsPath        = companion.Path{"f:spec", "f:taints"}
	unschedulablePath = companion.Path{"f:spec", "f:unschedulable"}
)

// Node explains the node called name. It only reads.
func Node(ctx context.Context, cs kubernetes.Interface, name string, o NodeOptions) (*NodeExplanation, error) {
	now := time.Now()
	if o.Now != nil {
		now = o.Now()
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %q: %w", name, err)
	}
	nodeList, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*v1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	podList, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %q: %w", name, err)
	}
	var pods []v1.Pod
	for _, p := range podList.Items {
		if p.Spec.NodeName == name { // the field selector, also where it is not applied (fakes)
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	// The Lease and the budgets complete the picture; without the right to
	// read them (a narrow role), the rest is still worth printing.
	var warnings []string
	var lease *time.Time
	if l, err := cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
		lease = &l.Spec.RenewTime.Time
	} else if apierrors.IsForbidden(err) {
		warnings = append(warnings, fmt.Sprintf("cannot read Lease %s/%s (%v): heartbeats from NodeStatus only", v1.NamespaceNodeLease, name, err))
	} else if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the Lease of node %q: %w", name, err)
	}
	var pdbs []policyv1.PodDisruptionBudget
	if o.Drain.Configured() {
		l, err := cs.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
		if ok, err := optionalList(err, "PodDisruptionBudgets", "pods they keep are not shown", &warnings); err != nil {
			return nil, err
		} else if ok {
			pdbs = l.Items
		}
	}
	var moves []drain.Move
	if o.Drain.Configured() {
		l, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if ok, err := optionalList(err, "Deployments", "moves before eviction are not shown", &warnings); err != nil {
			return nil, err
		} else if ok {
			for i := range l.Items {
				if m, ok := drain.MoveOf(&l.Items[i]); ok && m.Node == name {
					moves = append(moves, m)
				}
			}
		}
	}
	pols, err := readPolicies(ctx, cs, &warnings)
	if err != nil {
		return nil, err
	}
	e, err := explainNode(node, nodes, pods, lease, pdbs, pols, o, now)
	if e != nil {
		e.Warnings = append(warnings, e.Warnings...)
		e.Drain.Moves = moves
	}
	return e, err
}

// optionalList judges a list explain can answer without: forbidden is a
// warning saying what is not shown, any other error ends the answer.
func optionalList(err error, what, missing string, warnings *[]string) (bool, error) {
	switch {
	case apierrors.IsForbidden(err):
		*warnings = append(*warnings, fmt.Sprintf("cannot list %s (%v): %s", what, err, missing))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("listing %s: %w", what, err)
	}
	return true, nil
}

// explainNode judges what was read; it is pure.
func explainNode(node *v1.Node, nodes []*v1.Node, pods []v1.Pod, lease *time.Time, pdbs []policyv1.PodDisruptionBudget, pols policies, o NodeOptions, now time.Time) (*NodeExplanation, error) {
	e := &NodeExplanation{Name: node.Name, Now: now, Taints: []Taint{}, Evictions: []PodEviction{}}
	e.Settings = settingsOf(o)
	e.Heartbeats, e.Health = health(node, lease, o.NodeLifecycle, now)
	e.Zone = zoneOf(node, nodes, o.NodeLifecycle.UnhealthyZoneThreshold)
	e.Taints = taints(node, &e.Warnings)
	e.Evictions = evictions(node, pods, now)
	d, err := drainState(node, nodes, pods, pdbs, o.Drain, now)
	if err != nil {
		return nil, err
	}
	e.Drain = d
	e.OutOfService = outOfService(node)
	e.Remediation = remediationOf(node, nodes, pols, o.Cloud, now, &e.Warnings)
	return e, nil
}

func settingsOf(o NodeOptions) Settings {
	src := o.Source
	if src == "" {
		src = "defaults"
	}
	b := o.Drain.Budget
	return Settings{Source: src, NodeMonitorGracePeriod: o.NodeLifecycle.NodeMonitorGracePeriod.String(),
		NodeStartupGracePeriod: o.NodeLifecycle.NodeStartupGracePeriod.String(), UnhealthyZoneThreshold: o.NodeLifecycle.UnhealthyZoneThreshold,
		DrainConditions: drainConditions(o.Drain), MaxConcurrentDrains: b.MaxConcurrentDrains, MaxCordonedNodes: b.MaxCordonedNodes,
		GroupByLabel: b.GroupByLabel, DrainBuffer: b.DrainBuffer.String(), MaxUnhealthyNodes: b.MaxUnhealthyNodes}
}

func drainConditions(c drain.Config) []string {
	if c.File != "" {
		return []string{"from " + c.File}
	}
	return c.Conditions
}

// age is how long ago t was, to the second.
func age(t, now time.Time) string { return now.Sub(t).Truncate(time.Second).String() }

func ptrTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func health(n *v1.Node, lease *time.Time, cfg nodelifecycle.Config, now time.Time) (Heartbeats, Health) {
	grace, startup, from := cfg.GracePeriod(n, now)
	hb := Heartbeats{Grace: grace.String(), GraceSetting: "nodeMonitorGracePeriod"}
	ready := kube.NodeCondition(n, v1.NodeReady)
	var last time.Time
	if startup {
		hb.GraceSetting, last = "nodeStartupGracePeriod", from
	}
	if ready != nil && !ready.LastHeartbeatTime.IsZero() {
		t := ready.LastHeartbeatTime.Time
		hb.NodeStatus = &Heartbeat{Time: t, Age: age(t, now)}
		last = kube.NotBefore(t)
	}
	if lease != nil {
		hb.Lease = &Heartbeat{Time: *lease, Age: age(*lease, now)}
		if t := kube.NotBefore(*lease); t.After(last) {
			last = t
		}
	}
	hb.Deadline = last.Add(grace)
	h := Health{}
	if ready == nil {
		if now.Before(hb.Deadline) {
			h.Judgment = JudgmentStarting
			h.Message = fmt.Sprintf("no Ready condition yet; within the startup grace (%v from creation) until %s", grace, stamp(hb.Deadline))
		} else {
			h.Judgment = JudgmentOverdue
			h.Message = fmt.Sprintf("no Ready condition %v after creation (nodeStartupGracePeriod %v): marked Unknown (%s) at the next check", now.Sub(from).Truncate(time.Second), grace, nodelifecycle.ReasonStatusNeverUpdated)
		}
		return hb, h
	}
	h.Ready, h.Reason = string(ready.Status), ready.Reason
	h.Since = ptrTime(ready.LastTransitionTime.Time)
	h.MarkedBy, _ = companion.LastWriter(n, companion.ConditionPath(string(v1.NodeReady), "status"))
	switch ready.Status {
	case v1.ConditionTrue:
		if now.Before(hb.Deadline) {
			h.Judgment = JudgmentHealthy
			h.Message = fmt.Sprintf("heartbeats within the grace period (%v); marked Unknown at %s if nothing more is heard", grace, stamp(hb.Deadline))
		} else {
			h.Judgment = JudgmentOverdue
			h.Message = fmt.Sprintf("silent for %v, past the grace period (%v) since %s: marked Unknown at the next check", now.Sub(last).Truncate(time.Second), grace, stamp(hb.Deadline))
		}
	case v1.ConditionUnknown:
		h.Judgment = JudgmentUnknown
		h.Message = fmt.Sprintf("Ready=Unknown since %s (%s)", stamp(ready.LastTransitionTime.Time), ready.Reason)
		if ready.Reason == nodelifecycle.ReasonStatusUnknown || ready.Reason == nodelifecycle.ReasonStatusNeverUpdated {
			h.Message += ": the kubelet fell silent and the node lifecycle controller marked it"
		}
	default:
		h.Judgment = JudgmentNotReady
		h.Message = fmt.Sprintf("the kubelet reports Ready=%s since %s (%s: %s)", ready.Status, stamp(ready.LastTransitionTime.Time), ready.Reason, ready.Message)
	}
	return hb, h
}

func zoneOf(n *v1.Node, nodes []*v1.Node, threshold float32) Zone {
	key := topology.GetZoneKey(n)
	z := Zone{Name: n.Labels[v1.LabelTopologyZone], Excluded: nodetopology.ExcludedFromDisruption(n)}
	if z.Name == "" && key != "" {
		// No zone label: the region alone, as the key holds it.
		z.Name = strings.Trim(strings.ReplaceAll(key, ":\x00:", "/"), "/")
	}
	var conds []*v1.NodeCondition
	for _, m := range nodes {
		if topology.GetZoneKey(m) == key && !nodetopology.ExcludedFromDisruption(m) {
			conds = append(conds, kube.NodeCondition(m, v1.NodeReady))
		}
	}
	z.Nodes = len(conds)
	notReady, state := nodetopology.ComputeZoneState(conds, threshold)
	z.NotReady, z.State = notReady, string(state)
	return z
}

func taints(n *v1.Node, warnings *[]string) []Taint {
	out := []Taint{}
	manager, written, _ := companion.LastWrite(n, taintsPath)
	recs, err := owner.Read(n)
	if err != nil {
		*warnings = append(*warnings, err.Error()+": owners of taints and cordon not shown")
	}
	for _, t := range n.Spec.Taints {
		tt := Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect), SetBy: manager, Why: taintWhy(n, t)}
		if rec, ok := recs[owner.TaintKey(t)]; ok {
			tt.Owner = &rec
			tt.Why = rec.Why
		}
		switch {
		case t.TimeAdded != nil && !t.TimeAdded.IsZero():
			tt.Since, tt.SinceFrom = ptrTime(t.TimeAdded.Time), "timeAdded"
		case !written.IsZero():
			tt.Since, tt.SinceFrom = ptrTime(written), "managedFields"
		}
		out = append(out, tt)
	}
	return out
}

// conditionTaints are the node lifecycle controller's NoSchedule taints by condition.
var conditionTaints = map[string]v1.NodeConditionType{
	v1.TaintNodeMemoryPressure: v1.NodeMemoryPressure, v1.TaintNodeDiskPressure: v1.NodeDiskPressure,
	v1.TaintNodePIDPressure: v1.NodePIDPressure, v1.TaintNodeNetworkUnavailable: v1.NodeNetworkUnavailable,
}

func conditionText(n *v1.Node, t v1.NodeConditionType) string {
	c := kube.NodeCondition(n, t)
	if c == nil {
		return string(t) + " condition absent"
	}
	s := fmt.Sprintf("%s=%s since %s", t, c.Status, stamp(c.LastTransitionTime.Time))
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

func taintWhy(n *v1.Node, t v1.Taint) string {
	switch t.Key {
	case v1.TaintNodeNotReady:
		return "node not ready: " + conditionText(n, v1.NodeReady)
	case v1.TaintNodeUnreachable:
		return "node unreachable: " + conditionText(n, v1.NodeReady)
	case v1.TaintNodeUnschedulable:
		if n.Spec.Unschedulable {
			return "cordoned: spec.unschedulable is true"
		}
		return "cordon lifted: removed at the node lifecycle controller's next pass"
	case v1.TaintNodeOutOfService:
		if by := n.Annotations[outofservice.AnnotationConfirmedBy]; by != "" {
			return "machine confirmed dead: " + by
		}
		return "marked out of service"
	case "node.cloudprovider.kubernetes.io/shutdown":
		return "the cloud provider reports the machine shut down"
	case "node.cloudprovider.kubernetes.io/uninitialized":
		return "the cloud controller manager has not initialized the node yet"
	}
	if ct, ok := conditionTaints[t.Key]; ok {
		return conditionText(n, ct)
	}
	return ""
}

func isMirror(p *v1.Pod) bool {
	_, ok := p.Annotations[v1.MirrorPodAnnotationKey]
	return ok
}

func evictions(n *v1.Node, pods []v1.Pod, now time.Time) []PodEviction {
	out := []PodEviction{}
	hasNoExecute := false
	for _, t := range n.Spec.Taints {
		hasNoExecute = hasNoExecute || t.Effect == v1.TaintEffectNoExecute
	}
	for i := range pods {
		p := &pods[i]
		e := PodEviction{Namespace: p.Namespace, Name: p.Name}
		if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "DaemonSet" {
			e.Note = "DaemonSet pod: tolerates the not-ready and unreachable taints for ever; a deleted one is recreated on this node"
		}
		if isMirror(p) {
			e.Note = "mirror pod of a static pod: deleting it does not stop the container, the kubelet recreates it"
		}
		switch {
		case p.DeletionTimestamp != nil:
			e.Eviction = EvictGoing
		case !hasNoExecute:
			e.Eviction = EvictNoTaint
		default:
			must, due, cause := tainteviction.Deadline(p, n.Spec.Taints, now)
			switch {
			case !must:
				e.Eviction = EvictNever
			case cause == nil || !due.After(now):
				e.Eviction = EvictNow
				if cause != nil {
					e.Taint = cause.Key + ":" + string(cause.Effect)
				} else {
					e.Taint = untolerated(p, n.Spec.Taints)
				}
			default:
				e.Eviction, e.At, e.Taint = EvictAt, ptrTime(due), cause.Key+":"+string(cause.Effect)
				e.TolerationSeconds = tolerationSeconds(p, cause)
			}
		}
		out = append(out, e)
	}
	return out
}

// untolerated names the first NoExecute taint the pod does not tolerate for
// long, for a pod evicted at once.
func untolerated(p *v1.Pod, taints []v1.Taint) string {
	for _, t := range taints {
		if t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		if s := tolerationSeconds(p, &t); s == nil || *s <= 0 {
			return t.Key + ":" + string(t.Effect)
		}
	}
	return ""
}

// tolerationSeconds is the tolerationSeconds of the pod's first toleration of the taint.
func tolerationSeconds(p *v1.Pod, t *v1.Taint) *int64 {
	for i := range p.Spec.Tolerations {
		tol := &p.Spec.Tolerations[i]
		if tol.ToleratesTaint(klog.Background(), t, true) {
			return tol.TolerationSeconds
		}
	}
	return nil
}

func drainState(n *v1.Node, nodes []*v1.Node, pods []v1.Pod, pdbs []policyv1.PodDisruptionBudget, cfg drain.Config, now time.Time) (DrainState, error) {
	d := DrainState{Configured: cfg.Configured(), Cordoned: n.Spec.Unschedulable}
	st := cfg.ReadNodeState(n)
	d.CordonedByDrain = st.Owned
	if n.Spec.Unschedulable {
		d.CordonedBy, _ = companion.LastWriter(n, unschedulablePath)
	}
	d.Conditions, d.Attempts, d.RetryRequested = st.Conditions, st.Attempts, st.RetryNow
	d.ScheduledAt, d.FinishedAt, d.BlockedSince = ptrTime(st.ScheduledAt), ptrTime(st.FinishedAt), ptrTime(st.BlockedSince)
	d.CordonedAt = ptrTime(st.CordonedAt)
	if rec, ok := owner.Of(n, owner.Cordon); ok && n.Spec.Unschedulable {
		d.CordonOwner = &rec
	}
	d.RetryAt = ptrTime(st.RetryAt)
	if c := kube.NodeCondition(n, drain.ConditionDrainScheduled); c != nil {
		d.Message = c.Message
	}
	human := n.Spec.Unschedulable && !st.Owned
	// A remediation request makes the drain controller act without rules
	// (it runs for the remediation controller).
	req, asked, _ := rem.RequestOf(n)
	asked = asked && req.Drain
	if !d.Configured && !st.Owned && !asked {
		d.State, d.Summary = "not-configured", "no drain rules in the settings (drain.drainCondition or drain.drainRules): the drain controller does not run"
		if human {
			d.Summary += "; cordoned by " + who(d.CordonedBy) + ", not by nodeshepherd"
		}
		return d, nil
	}
	r, err := cfg.Compile()
	if err != nil {
		return d, fmt.Errorf("drain settings: %w", err)
	}
	d.Selected, _ = r.Selector.Matches(n)
	eval := r.Evaluate(n, now)
	for _, m := range eval.Matched {
		d.Matched = append(d.Matched, m.String())
		if c := kube.NodeCondition(n, m.Type); c != nil && (d.MatchedSince == nil || c.LastTransitionTime.Time.Before(*d.MatchedSince)) {
			d.MatchedSince = ptrTime(c.LastTransitionTime.Time)
		}
	}
	d.PendingUntil = ptrTime(eval.Pending)
	cluster := drain.BudgetCluster(&cfg, r, nodes)
	switch {
	case st.Owned && !n.Spec.Unschedulable:
		d.State, d.Summary = "none", "uncordoned by someone else: the drain controller forgets the node"
	case st.Owned:
		d.State = "cordoned"
		switch st.Phase {
		case drain.PhaseDraining:
			d.State, d.Summary = "draining", "draining since "+stamp(st.ScheduledAt)
		case drain.PhaseCompleted:
			d.State, d.Summary = "completed", "drained at "+stamp(st.FinishedAt)
		case drain.PhaseFailed:
			d.State, d.Summary = "failed", fmt.Sprintf("the drain failed at %s (attempt %d); retried at %s", stamp(st.FinishedAt), max(st.Attempts, 1), stamp(st.RetryAt))
			if st.RetryNow {
				d.Summary = fmt.Sprintf("the drain failed at %s; retried at once (%s=true)", stamp(st.FinishedAt), drain.AnnotationRetry)
			}
		default:
			d.Summary = "cordoned by nodeshepherd (" + strings.Trim(st.Conditions+"; "+st.Request, "; ") + ")"
			if cfg.SkipDrain {
				d.Summary += "; not drained (skipDrain)"
			} else if len(eval.Matched) > 0 {
				d.Budget = drainVerdict(&cfg, r, cluster, n.Name, now)
			}
		}
		switch {
		case asked:
			d.Summary += "; for " + req.Why() + ": uncordoned when the repair ends"
		case len(eval.Matched) == 0 && eval.Pending.IsZero():
			d.Summary += fmt.Sprintf("; no rule matches any more: uncordoned after uncordonAfter (%v)", cfg.UncordonAfter)
		}
	case asked && human:
		d.State, d.Summary = "left-to-human", "cordoned by "+who(d.CordonedBy)+"; nodeshepherd leaves it (not drained although "+req.Why()+" asks for it)"
	case asked:
		d.State, d.Summary = "pending", req.Why()+" asks for a drain: cordoned at the drain controller's next check, within its budgets"
	case !d.Selected:
		d.State, d.Summary = "not-selected", "the drain rules' node selection does not take this node"
	case len(eval.Matched) > 0 && human:
		d.State, d.Summary = "left-to-human", "cordoned by "+who(d.CordonedBy)+"; nodeshepherd leaves it (not drained although "+strings.Join(d.Matched, ", ")+" matches)"
	case len(eval.Matched) > 0:
		v := cfg.Budget.Cordon(cluster, n.Name)
		d.Budget = verdict("cordon", v)
		d.State, d.Summary = "waiting", "matches "+strings.Join(d.Matched, ", ")+"; waiting to cordon: "+v.Reason
		if v.Allowed {
			d.State, d.Summary = "pending", "matches "+strings.Join(d.Matched, ", ")+": cordoned at the controller's next check"
		}
	case !eval.Pending.IsZero():
		d.State, d.Summary = "pending", "a drain condition holds; it matches at "+stamp(eval.Pending)
	default:
		d.State, d.Summary = "none", "no drain condition matches"
		if human {
			d.Summary += "; cordoned by " + who(d.CordonedBy) + ", not by nodeshepherd"
		}
	}
	if d.Budget != nil && !d.Budget.Allowed && d.State == "cordoned" {
		d.State, d.Summary = "waiting", d.Summary+"; waiting to drain: "+d.Budget.Reason
	}
	if st.Owned || len(eval.Matched) > 0 {
		d.Blockers = blockers(pods, pdbs, &cfg)
	}
	d.MoveBeforeEvict = cfg.MoveBeforeEvict
	return d, nil
}

func who(manager string) string {
	if manager == "" {
		return "someone else"
	}
	return manager
}

func verdict(action string, v budget.Verdict) *Verdict {
	return &Verdict{Action: action, Allowed: v.Allowed, Budget: v.Budget, Reason: v.Reason, RetryAt: ptrTime(v.RetryAt)}
}

// drainVerdict is whether the drain of a cordoned node may start now: the
// maintenance windows, then the budgets.
func drainVerdict(cfg *drain.Config, r *rules.Rules, cl budget.Cluster, name string, now time.Time) *Verdict {
	if w := r.Windows; !w.Open(now) {
		next := w.Next(now)
		return &Verdict{Action: "drain", Budget: drain.BudgetMaintenanceWindow, RetryAt: &next,
			Reason: fmt.Sprintf("outside the maintenance windows (%s); the drain starts at %s", w, next.In(w.Loc).Format(time.RFC3339))}
	}
	return verdict("drain", cfg.Budget.StartDrain(cl, name, now))
}

// blockers are the pods a drain would evict whose PodDisruptionBudget
// allows no disruption now.
func blockers(pods []v1.Pod, pdbs []policyv1.PodDisruptionBudget, cfg *drain.Config) []Blocker {
	var out []Blocker
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || cfg.PodSkipReason(p) != "" {
			continue
		}
		for j := range pdbs {
			b := &pdbs[j]
			if !kube.PDBSelects(b, p) || b.Status.DisruptionsAllowed > 0 {
				continue
			}
			why := fmt.Sprintf("no disruption allowed: %d healthy, %d desired", b.Status.CurrentHealthy, b.Status.DesiredHealthy)
			if b.Spec.MinAvailable != nil {
				why += " (minAvailable " + b.Spec.MinAvailable.String() + ")"
			}
			if b.Spec.MaxUnavailable != nil {
				why += " (maxUnavailable " + b.Spec.MaxUnavailable.String() + ")"
			}
			out = append(out, Blocker{Pod: p.Namespace + "/" + p.Name, PodDisruptionBudget: b.Namespace + "/" + b.Name,
				DisruptionsAllowed: b.Status.DisruptionsAllowed, CurrentHealthy: b.Status.CurrentHealthy, DesiredHealthy: b.Status.DesiredHealthy,
				ExpectedPods: b.Status.ExpectedPods, Why: why})
		}
	}
	return out
}

func outOfService(n *v1.Node) OutOfServiceSet {
	o := OutOfServiceSet{State: "in-service", BootID: n.Annotations[outofservice.AnnotationBootID], ConfirmedBy: n.Annotations[outofservice.AnnotationConfirmedBy]}
	if v, ok := n.Annotations[outofservice.AnnotationConfirm]; ok {
		o.Confirmation = &v
		o.ConfirmationBootID = n.Annotations[outofservice.AnnotationConfirmationBootID]
		o.NodeBootID = n.Status.NodeInfo.BootID
	}
	for _, t := range n.Spec.Taints {
		if t.Key != v1.TaintNodeOutOfService {
			continue
		}
		o.State, o.Taint = "out-of-service", t.Value+":"+string(t.Effect)
		var written time.Time
		o.SetBy, written, _ = companion.LastWrite(n, taintsPath)
		o.Since = ptrTime(written) // when the taint list was last written, without timeAdded
		if t.TimeAdded != nil {
			o.Since = ptrTime(t.TimeAdded.Time)
		}
	}
	switch {
	case o.State == "out-of-service" && o.BootID != "":
		o.Summary = fmt.Sprintf("out of service, set by nodeshepherd's outofservice controller (confirmed by %s; boot ID %s): volumes are detached and pods deleted; lifted when the node boots again with another boot ID", o.ConfirmedBy, o.BootID)
	case o.State == "out-of-service":
		o.Summary = "out of service, set by " + who(o.SetBy) + " (not by nodeshepherd, which leaves it): volumes are detached and pods deleted"
	case o.Confirmation != nil && o.ConfirmationBootID != "" && o.NodeBootID != "" && o.ConfirmationBootID != o.NodeBootID:
		o.State = "confirmation-expired"
		o.Summary = fmt.Sprintf("a person confirmed the machine dead (%s=%q) for boot %s, but the node now reports boot %s: the confirmation no longer applies and the outofservice controller (when it runs) removes it", outofservice.AnnotationConfirm, *o.Confirmation, o.ConfirmationBootID, o.NodeBootID)
	case o.Confirmation != nil:
		o.State = "confirmed"
		boot := "for the boot it was written during (not recorded yet: the controller records the current boot only if it can show that the confirmation was written during it, and counts it for nothing otherwise)"
		if o.ConfirmationBootID != "" {
			boot = "for boot " + o.ConfirmationBootID + " only"
		}
		o.Summary = fmt.Sprintf("a person confirmed the machine dead (%s=%q), %s; the outofservice controller (when it runs) taints it once the node has been NotReady long enough (outOfService settings)", outofservice.AnnotationConfirm, *o.Confirmation, boot)
	default:
		o.Summary = "in service"
	}
	return o
}
