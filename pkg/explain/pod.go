package explain

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
)

// PodExplanation is why a pod is Pending: per-node reasons as kube-scheduler
// summarises them, the nominated node and preemption attempts.
type PodExplanation struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Phase     v1.PodPhase `json:"phase"`
	// Pending is true for a pod no node is bound to yet; the rest of the
	// evaluation is only made for such a pod.
	Pending bool `json:"pending"`
	// NodeName is the node the pod is bound to.
	NodeName          string `json:"nodeName,omitempty"`
	SchedulerName     string `json:"schedulerName"`
	Priority          int32  `json:"priority"`
	PreemptionPolicy  string `json:"preemptionPolicy"`
	NominatedNodeName string `json:"nominatedNodeName,omitempty"`
	// PodScheduled is the condition as the scheduler last wrote it.
	PodScheduled *PodCondition `json:"podScheduled,omitempty"`
	// Summary is kube-scheduler's message for the pod as the cluster is
	// now: "0/N nodes are available: ... preemption: ...".
	Summary string `json:"summary,omitempty"`
	// Refused says why the scheduler would not evaluate the pod at all.
	Refused string `json:"refused,omitempty"`
	// Nodes are every node's answer to the pod now, in name order.
	Nodes []scheduler.NodeFit `json:"nodes,omitempty"`
	// Preemption is what preemption would do now, when no node fits and
	// removing lower-priority pods from one would make room.
	Preemption *PreemptionChoice `json:"preemption,omitempty"`
	// Events are the scheduling events about the pod, repeats merged,
	// oldest first.
	Events []PodEvent `json:"events,omitempty"`
	// Victims are the pods preempted for this one, as their Preempted
	// events say.
	Victims []PreemptedPod `json:"victims,omitempty"`
	// PreemptionAttempts are the scheduler's preemption outcomes for the
	// pod, from the events: its verdicts ("not eligible due to ...",
	// "0/N nodes are available: ...") and the victims it preempted,
	// oldest first.
	PreemptionAttempts []PreemptionAttempt `json:"preemptionAttempts,omitempty"`
	// Notes say what could not be read, and so is missing.
	Notes []string `json:"notes,omitempty"`
}

// PodCondition is a pod condition as written.
type PodCondition struct {
	Status             v1.ConditionStatus `json:"status"`
	Reason             string             `json:"reason,omitempty"`
	Message            string             `json:"message,omitempty"`
	LastTransitionTime metav1.Time        `json:"lastTransitionTime,omitempty"`
}

// PreemptionChoice is preemption's dry run: the node and its victims.
type PreemptionChoice struct {
	Node    string             `json:"node"`
	Victims []scheduler.Victim `json:"victims"`
}

// PodEvent is one kind of event about the pod, with its repeats counted.
type PodEvent struct {
	Type      string      `json:"type"`
	Reason    string      `json:"reason"`
	From      string      `json:"from,omitempty"`
	Message   string      `json:"message"`
	Count     int32       `json:"count"`
	FirstSeen metav1.Time `json:"firstSeen"`
	LastSeen  metav1.Time `json:"lastSeen"`
}

// PreemptionAttempt is one outcome of preemption for the pod, its repeats
// counted: Outcome is the verdict after "preemption: " in a FailedScheduling
// event, or "preempted NAMESPACE/NAME" with the victim's Node.
type PreemptionAttempt struct {
	FirstSeen metav1.Time `json:"firstSeen"`
	LastSeen  metav1.Time `json:"lastSeen"`
	Count     int32       `json:"count"`
	Node      string      `json:"node,omitempty"`
	Outcome   string      `json:"outcome"`
	From      string      `json:"from,omitempty"`
}

// PreemptedPod is a victim of the pod's preemptions.
type PreemptedPod struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Node      string      `json:"node,omitempty"`
	From      string      `json:"from,omitempty"`
	Count     int32       `json:"count"`
	LastSeen  metav1.Time `json:"lastSeen"`
}

// schedulingReasons are the event reasons of kube-scheduler, nodeshepherd's
// scheduler and cluster-autoscaler about a pod's placement; events from any
// scheduler are kept too.
var schedulingReasons = map[string]bool{
	"FailedScheduling": true, "Scheduled": true, "Preempted": true, "Preempting": true,
	"TriggeredScaleUp": true, "NotTriggerScaleUp": true, "FailedBinding": true,
}

// Pod explains the pod namespace/name. It only reads.
//
// sched is the scheduler's settings that decide fits (scheduler.Config's
// AddExplainFlags); its KubeSchedulerConfig is read for the profile of the
// pod's spec.schedulerName, and an error in it is a usage error.
func Pod(ctx context.Context, cs kubernetes.Interface, namespace, name string, sched scheduler.Config) (*PodExplanation, error) {
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %q not found in namespace %q (check the name and -n/--namespace)", name, namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	e := describePod(pod)
	events, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Pod", "involvedObject.name": name}.AsSelector().String()})
	if err != nil {
		return nil, fmt.Errorf("listing the events of pod %s/%s: %w", namespace, name, err)
	}
	e.Events = podEvents(pod, events.Items)
	victims, note, err := preemptedEvents(ctx, cs, namespace)
	if err != nil {
		return nil, err
	}
	if note != "" {
		e.Notes = append(e.Notes, note)
	}
	e.Victims = victimsOf(pod, victims)
	e.PreemptionAttempts = attempts(e.Events, e.Victims)
	if !e.Pending {
		return e, nil
	}
	snap, err := snapshot(ctx, cs, pod)
	if err != nil {
		return nil, err
	}
	if sched.KubeSchedulerConfig != "" {
		sched.SchedulerName = pod.Spec.SchedulerName
		if err := sched.Validate(); err != nil {
			return nil, cli.Usagef("pod %s/%s asks for scheduler %s: %v", namespace, name, pod.Spec.SchedulerName, err)
		}
	}
	r, err := scheduler.ExplainWith(ctx, pod, *snap, sched)
	if err != nil {
		return nil, err
	}
	e.apply(r)
	return e, nil
}

// describePod fills what the pod object itself says.
func describePod(pod *v1.Pod) *PodExplanation {
	e := &PodExplanation{Namespace: pod.Namespace, Name: pod.Name, Phase: pod.Status.Phase, NodeName: pod.Spec.NodeName,
		SchedulerName: pod.Spec.SchedulerName, NominatedNodeName: pod.Status.NominatedNodeName,
		PreemptionPolicy: string(v1.PreemptLowerPriority)}
	e.Pending = pod.Spec.NodeName == "" && (pod.Status.Phase == "" || pod.Status.Phase == v1.PodPending)
	if pod.Spec.Priority != nil {
		e.Priority = *pod.Spec.Priority
	}
	if pod.Spec.PreemptionPolicy != nil {
		e.PreemptionPolicy = string(*pod.Spec.PreemptionPolicy)
	}
	if d := pod.DeletionTimestamp; d != nil {
		e.Notes = append(e.Notes, "the pod is being deleted (since "+stamp(d.Time)+"): no scheduler places it any more")
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled {
			e.PodScheduled = &PodCondition{Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime}
		}
	}
	return e
}

func (e *PodExplanation) apply(r *scheduler.FitReport) {
	e.Refused = r.Refused
	e.Summary = r.Message
	e.Nodes = r.Nodes
	if r.PreemptionNode != "" {
		e.Preemption = &PreemptionChoice{Node: r.PreemptionNode, Victims: r.Victims}
	}
}

// snapshot lists what the scheduler's informers would hold.
func snapshot(ctx context.Context, cs kubernetes.Interface, pod *v1.Pod) (*scheduler.Snapshot, error) {
	s := &scheduler.Snapshot{Taken: time.Now()}
	list := func(what string, f func() error) error {
		if err := f(); err != nil {
			return fmt.Errorf("listing %s to evaluate pod %s/%s: %w", what, pod.Namespace, pod.Name, err)
		}
		return nil
	}
	all := metav1.ListOptions{}
	err := list("nodes", func() error {
		l, err := cs.CoreV1().Nodes().List(ctx, all)
		if err == nil {
			s.Nodes = l.Items
		}
		return err
	})
	if err == nil {
		err = list("pods", func() error {
			l, err := cs.CoreV1().Pods("").List(ctx, all)
			if err == nil {
				s.Pods = l.Items
			}
			return err
		})
	}
	if err == nil {
		err = list("poddisruptionbudgets", func() error {
			l, err := cs.PolicyV1().PodDisruptionBudgets("").List(ctx, all)
			if err == nil {
				s.PDBs = l.Items
			}
			return err
		})
	}
	if err == nil {
		err = list("namespaces", func() error {
			l, err := cs.CoreV1().Namespaces().List(ctx, all)
			if err == nil {
				s.Namespaces = l.Items
			}
			return err
		})
	}
	if err == nil && scheduler.UsesClaims(pod) {
		err = list("storage objects", func() error { return listVolumes(ctx, cs, s) })
	}
	if err == nil && scheduler.UsesResourceClaims(pod) {
		err = list("resource objects (resource.k8s.io/v1)", func() error { return listDRA(ctx, cs, s) })
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func listVolumes(ctx context.Context, cs kubernetes.Interface, s *scheduler.Snapshot) error {
	all := metav1.ListOptions{}
	v := &scheduler.VolumeSnapshot{}
	pvcs, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, all)
	if err != nil {
		return err
	}
	v.PersistentVolumeClaims = pvcs.Items
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, all)
	if err != nil {
		return err
	}
	v.PersistentVolumes = pvs.Items
	classes, err := cs.StorageV1().StorageClasses().List(ctx, all)
	if err != nil {
		return err
	}
	v.StorageClasses = classes.Items
	csiNodes, err := cs.StorageV1().CSINodes().List(ctx, all)
	if err != nil {
		return err
	}
	v.CSINodes = csiNodes.Items
	drivers, err := cs.StorageV1().CSIDrivers().List(ctx, all)
	if err != nil {
		return err
	}
	v.CSIDrivers = drivers.Items
	caps, err := cs.StorageV1().CSIStorageCapacities("").List(ctx, all)
	if err != nil {
		return err
	}
	v.CSIStorageCapacities = caps.Items
	atts, err := cs.StorageV1().VolumeAttachments().List(ctx, all)
	if err != nil {
		return err
	}
	v.VolumeAttachments = atts.Items
	s.Volumes = v
	return nil
}

// eventTimes are an event's first and last sighting and its count, from
// whichever API (core/v1 or events.k8s.io) wrote it.
func eventTimes(ev *v1.Event) (first, last metav1.Time, count int32) {
	first, last, count = ev.FirstTimestamp, ev.LastTimestamp, ev.Count
	if first.IsZero() {
		first = metav1.Time{Time: ev.EventTime.Time}
	}
	if ev.Series != nil {
		count = max(count, ev.Series.Count)
		if !ev.Series.LastObservedTime.IsZero() {
			last = metav1.Time{Time: ev.Series.LastObservedTime.Time}
		}
	}
	if last.IsZero() || last.Before(&first) {
		last = first
	}
	return first, last, max(count, 1)
}

func eventSource(ev *v1.Event) string {
	if ev.Source.Component != "" {
		return ev.Source.Component
	}
	return ev.ReportingController
}

// podEvents keeps the scheduling events about this pod (not an earlier pod
// of the same name), merges repeats of the same report and orders them
// oldest first.
func podEvents(pod *v1.Pod, events []v1.Event) []PodEvent {
	type key struct{ typ, reason, from, msg string }
	merged := map[key]*PodEvent{}
	for i := range events {
		ev := &events[i]
		o := ev.InvolvedObject
		if o.Kind != "Pod" || o.Name != pod.Name || o.Namespace != pod.Namespace || (o.UID != "" && o.UID != pod.UID) {
			continue
		}
		from := eventSource(ev)
		if !schedulingReasons[ev.Reason] && !strings.Contains(from, "scheduler") {
			continue
		}
		first, last, count := eventTimes(ev)
		k := key{ev.Type, ev.Reason, from, ev.Message}
		if m := merged[k]; m != nil {
			m.Count += count
			if first.Before(&m.FirstSeen) {
				m.FirstSeen = first
			}
			if m.LastSeen.Before(&last) {
				m.LastSeen = last
			}
			continue
		}
		merged[k] = &PodEvent{Type: ev.Type, Reason: ev.Reason, From: from, Message: ev.Message, Count: count, FirstSeen: first, LastSeen: last}
	}
	out := make([]PodEvent, 0, len(merged))
	for _, m := range merged {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b PodEvent) int {
		if c := a.FirstSeen.Compare(b.FirstSeen.Time); c != 0 {
			return c
		}
		if c := a.LastSeen.Compare(b.LastSeen.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Reason+a.Message, b.Reason+b.Message)
	})
	return out
}

// preemptedEvents lists the Preempted events of the cluster (victims may
// live in any namespace), or of the pod's namespace when the user may not
// list events cluster-wide.
func preemptedEvents(ctx context.Context, cs kubernetes.Interface, namespace string) ([]v1.Event, string, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Preempted").String()}
	note := ""
	l, err := cs.CoreV1().Events("").List(ctx, opts)
	if apierrors.IsForbidden(err) {
		note = "events may not be listed in all namespaces with these credentials: victims are shown from namespace " + namespace + " only"
		l, err = cs.CoreV1().Events(namespace).List(ctx, opts)
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing Preempted events: %w", err)
	}
	return l.Items, note, nil
}

// victimsOf picks the Preempted events that name pod as the preemptor:
// "Preempted by pod <uid> on node <node>" (kube-scheduler also sets the
// preemptor as the related object).
func victimsOf(pod *v1.Pod, events []v1.Event) []PreemptedPod {
	prefix := "Preempted by pod " + string(pod.UID)
	type key struct{ ns, name, node string }
	merged := map[key]*PreemptedPod{}
	for i := range events {
		ev := &events[i]
		if ev.Reason != "Preempted" || ev.InvolvedObject.Kind != "Pod" {
			continue
		}
		related := ev.Related != nil && ev.Related.UID == pod.UID
		if !related && !strings.HasPrefix(ev.Message, prefix) {
			continue
		}
		node := ""
		if _, after, ok := strings.Cut(ev.Message, " on node "); ok {
			node = strings.TrimSpace(after)
		}
		_, last, count := eventTimes(ev)
		k := key{ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, node}
		if m := merged[k]; m != nil {
			m.Count += count
			if m.LastSeen.Before(&last) {
				m.LastSeen = last
			}
			continue
		}
		merged[k] = &PreemptedPod{Namespace: k.ns, Name: k.name, Node: node, From: eventSource(ev), Count: count, LastSeen: last}
	}
	out := make([]PreemptedPod, 0, len(merged))
	for _, m := range merged {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b PreemptedPod) int {
		if c := a.LastSeen.Compare(b.LastSeen.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// preemptionMarker starts the preemption part of a scheduler's message.
const preemptionMarker = "preemption: "

// attempts lists the preemption verdicts of the pod's FailedScheduling events
// and its victims, oldest first.
func attempts(events []PodEvent, victims []PreemptedPod) []PreemptionAttempt {
	var out []PreemptionAttempt
	for _, ev := range events {
		i := strings.LastIndex(ev.Message, preemptionMarker)
		if ev.Reason != "FailedScheduling" || i < 0 {
			continue
		}
		out = append(out, PreemptionAttempt{FirstSeen: ev.FirstSeen, LastSeen: ev.LastSeen, Count: ev.Count,
			Outcome: ev.Message[i+len(preemptionMarker):], From: ev.From})
	}
	for _, v := range victims {
		out = append(out, PreemptionAttempt{FirstSeen: v.LastSeen, LastSeen: v.LastSeen, Count: v.Count, Node: v.Node,
			Outcome: "preempted " + v.Namespace + "/" + v.Name, From: v.From})
	}
	slices.SortStableFunc(out, func(a, b PreemptionAttempt) int {
		if c := a.FirstSeen.Compare(b.FirstSeen.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Outcome, b.Outcome)
	})
	return out
}

// WriteTable prints the explanation for people, laid out like kubectl
// describe.
func (e *PodExplanation) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("Pod:\t%s/%s", e.Namespace, e.Name)
	switch {
	case e.Pending:
		p("Status:\tPending: not bound to a node")
	case e.NodeName != "":
		p("Status:\tScheduled: bound to node %s, phase %s", e.NodeName, e.Phase)
	default:
		p("Status:\tnot Pending: phase %s, not bound to a node", e.Phase)
	}
	p("Scheduler:\t%s", e.SchedulerName)
	p("Priority:\t%d (preemptionPolicy %s)", e.Priority, e.PreemptionPolicy)
	if e.Pending || e.NominatedNodeName != "" {
		p("Nominated node:\t%s", orNone(e.NominatedNodeName))
	}
	if c := e.PodScheduled; c != nil {
		p("PodScheduled:\t%s %s (since %s)", c.Status, c.Reason, stamp(c.LastTransitionTime.Time))
		if c.Message != "" {
			p("  Message:\t%s", c.Message)
		}
	}
	if e.Pending {
		switch {
		case e.Refused != "":
			p("Refused now:\t%s", e.Refused)
		case e.Summary != "":
			p("Evaluated now:\t%s", e.Summary)
		default:
			p("Evaluated now:\ta node fits; the scheduler has not bound the pod yet")
		}
		if c := e.Preemption; c != nil {
			var names []string
			for _, v := range c.Victims {
				names = append(names, fmt.Sprintf("%s/%s (priority %d)", v.Namespace, v.Name, v.Priority))
			}
			p("Preemption now:\twould preempt on node %s: %s", c.Node, strings.Join(names, ", "))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e.Pending && len(e.Nodes) > 0 {
		fmt.Fprintln(w, "\nNodes:")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		p("  NODE\tFITS\tREASONS")
		for _, n := range e.Nodes {
			fits, reasons := "yes", "-"
			if !n.Fits {
				fits, reasons = "no", strings.Join(n.Reasons, ", ")
				if n.PreemptionMayHelp {
					reasons += " (preemption may help)"
				}
			}
			p("  %s\t%s\t%s", n.Node, fits, reasons)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(e.PreemptionAttempts) > 0 {
		fmt.Fprintln(w, "\nPreemption attempts:")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		p("  FIRST SEEN\tLAST SEEN\tCOUNT\tNODE\tOUTCOME")
		for _, a := range e.PreemptionAttempts {
			p("  %s\t%s\t%d\t%s\t%s", stamp(a.FirstSeen.Time), stamp(a.LastSeen.Time), a.Count, orNone(a.Node), a.Outcome)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nScheduling events:")
	if len(e.Events) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		p("  FIRST SEEN\tLAST SEEN\tCOUNT\tTYPE\tREASON\tFROM\tMESSAGE")
		for _, ev := range e.Events {
			p("  %s\t%s\t%d\t%s\t%s\t%s\t%s", stamp(ev.FirstSeen.Time), stamp(ev.LastSeen.Time), ev.Count, ev.Type, ev.Reason, orNone(ev.From), ev.Message)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range e.Notes {
		fmt.Fprintf(w, "\nNote: %s\n", n)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// listDRA lists what DynamicResources reads: every ResourceClaim (the
// allocated ones hold devices), ResourceSlice, DeviceClass and
// DeviceTaintRule.
func listDRA(ctx context.Context, cs kubernetes.Interface, s *scheduler.Snapshot) error {
	d := &scheduler.DRASnapshot{}
	all := metav1.ListOptions{}
	claims, err := cs.ResourceV1().ResourceClaims("").List(ctx, all)
	if err != nil {
		return err
	}
	d.ResourceClaims = claims.Items
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, all)
	if err != nil {
		return err
	}
	d.ResourceSlices = slices.Items
	classes, err := cs.ResourceV1().DeviceClasses().List(ctx, all)
	if err != nil {
		return err
	}
	d.DeviceClasses = classes.Items
	rules, err := cs.ResourceV1().DeviceTaintRules().List(ctx, all)
	if err != nil {
		return err
	}
	d.DeviceTaintRules = rules.Items
	s.DRA = d
	return nil
}
