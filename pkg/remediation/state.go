package remediation

import (
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// AnnotationState holds a node's place on its policy's ladder, on the
// Node, so that a restarted process or a new leader climbs on from there.
const AnnotationState = "nodeshepherd.io/remediation"

// stateRecord is AnnotationState's JSON.
type stateRecord struct {
	Policy string `json:"policy"`
	Step   int    `json:"step"`
	Action Action `json:"action"`
	// Key is the step's identity: its number when the node reached it and
	// what it does (StepKey). A policy edit moves the record with its step
	// or ends the repair (PolicySpec.Place); the provider's request IDs are
	// made from it, so a step that moved is never asked again under
	// another ID. Records written before it had none: Step and Action.
	Key         string    `json:"key,omitempty"`
	StepSince   time.Time `json:"stepSince"`
	RepairSince time.Time `json:"repairSince"`
	BootID      string    `json:"bootID,omitempty"`
	// Drain: the ladder has reached a Drain step; the drain controller
	// keeps the node cordoned and drained until the record goes.
	Drain bool `json:"drain,omitempty"`
	// FenceBootID: the ladder has reached a Fence step and the cloud
	// provider confirmed the machine powered off, in this boot (written only
	// then); the outofservice controller counts it as a confirmation of
	// that boot only, and only while the provider answers it off.
	FenceBootID string `json:"fenceBootID,omitempty"`
	// ResumeAt (0: none): a repair resumed after a recurrence
	// started at a Drain step below its target; it climbs to this step as
	// soon as the drain is done.
	ResumeAt int `json:"resumeAt,omitempty"`
	// MachineOff: the step started on the provider's answer that the
	// machine is off (State.MachineOff); its requests say so.
	MachineOff bool `json:"machineOff,omitempty"`
	// Expires: the remediation controller renews it while it runs, as it
	// does its taints' owner records (owner.Lease); once it passes, the
	// record is an orphan's, and a nodeshepherd process removes it
	// (pkg/owner/janitor), so the drain stops holding a cordon for a
	// repair nobody runs. None: it never expires.
	Expires *time.Time `json:"expires,omitempty"`
}

// ReadState returns the node's place on the ladder of policy, NotInRepair
// when it has none (or one of another policy). A malformed annotation is an
// error, and the node counts as in repair at no known step: the controller
// must not start a second repair over one it cannot read.
func ReadState(n *v1.Node, policy string, steps int) (State, error) {
	st, err := ReadRecord(n, policy)
	if err == nil && st.Step >= steps {
		return NotInRepair, fmt.Errorf("node %s: annotation %s: step %d, but policy %s has %d steps", n.Name, AnnotationState, st.Step+1, policy, steps)
	}
	return st, err
}

// ReadRecord is ReadState without the ladder: the record as written, its
// step perhaps no longer in the policy's ladder (an edit), for
// PolicySpec.Place to find or end.
func ReadRecord(n *v1.Node, policy string) (State, error) {
	s, ok := n.Annotations[AnnotationState]
	if !ok {
		return NotInRepair, nil
	}
	r, err := parseState(s)
	if err != nil {
		return NotInRepair, fmt.Errorf("node %s: annotation %s: %w", n.Name, AnnotationState, err)
	}
	if r.Policy != policy {
		return NotInRepair, nil
	}
	key := r.Key
	if key == "" {
		key = fmt.Sprintf("%d/%s", r.Step+1, r.Action)
	}
	return State{Step: r.Step, Action: r.Action, Key: key, StepSince: r.StepSince, RepairSince: r.RepairSince, BootID: r.BootID,
		Drain: r.Drain, FenceBootID: r.FenceBootID, ResumeAt: r.ResumeAt, MachineOff: r.MachineOff}, nil
}

func parseState(s string) (stateRecord, error) {
	var r stateRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return stateRecord{}, err
	}
	switch {
	case r.Policy == "":
		return stateRecord{}, fmt.Errorf("no policy")
	case r.Step < 0:
		return stateRecord{}, fmt.Errorf("step %d", r.Step)
	case r.StepSince.IsZero() || r.RepairSince.IsZero() || r.StepSince.Before(r.RepairSince):
		return stateRecord{}, fmt.Errorf("times: step since %v, repair since %v", r.StepSince, r.RepairSince)
	}
	return r, nil
}

// EncodeState is the annotation's value for the node at step of policy
// (st.Key empty: the step's number and action).
func EncodeState(policy string, action Action, st State) string {
	key := st.Key
	if key == "" {
		key = fmt.Sprintf("%d/%s", st.Step+1, action)
	}
	b, _ := json.Marshal(stateRecord{Policy: policy, Step: st.Step, Action: action, Key: key, StepSince: st.StepSince, RepairSince: st.RepairSince,
		BootID: st.BootID, Drain: st.Drain, FenceBootID: st.FenceBootID, ResumeAt: max(st.ResumeAt, 0), MachineOff: st.MachineOff})
	return string(b)
}

// RecordExpiry returns the expiry of the node's repair record, whatever
// its policy: present is false when there is no record, expires nil when it
// has no expiry; a malformed record is an error (it is left alone).
func RecordExpiry(n *v1.Node) (expires *time.Time, present bool, err error) {
	s, ok := n.Annotations[AnnotationState]
	if !ok {
		return nil, false, nil
	}
	r, err := parseState(s)
	if err != nil {
		return nil, true, fmt.Errorf("node %s: annotation %s: %w", n.Name, AnnotationState, err)
	}
	return r.Expires, true, nil
}

// SetRecordExpiry writes expires into the node's repair record (n is
// changed); false when there is none, or it is malformed.
func SetRecordExpiry(n *v1.Node, expires time.Time) bool {
	s, ok := n.Annotations[AnnotationState]
	if !ok {
		return false
	}
	r, err := parseState(s)
	if err != nil {
		return false
	}
	r.Expires = &expires
	b, _ := json.Marshal(r)
	n.Annotations[AnnotationState] = string(b)
	return true
}

// Request is what a node's repair asks of the other controllers: the drain
// controller drains a node whose Drain is set, the outofservice controller
// takes a confirmed Fence (FenceBootID) for the boot it names as a
// confirmation of that boot's death, while the provider answers it off. Why names the policy and step, for their events and records.
type Request struct {
	Policy      string
	Step        int
	Action      Action
	Since       time.Time
	Drain       bool
	FenceBootID string
}

// Why words the request for another controller's messages.
func (r Request) Why() string {
	return fmt.Sprintf("remediation policy %s, step %d (%s)", r.Policy, r.Step+1, r.Action)
}

// RequestOf reads the node's repair request (ok false: no repair under
// way). A malformed record is an error: it asks nothing, and the caller
// says so rather than acting on it.
func RequestOf(n *v1.Node) (r Request, ok bool, err error) {
	s, found := n.Annotations[AnnotationState]
	if !found {
		return Request{}, false, nil
	}
	rec, err := parseState(s)
	if err != nil {
		return Request{}, false, fmt.Errorf("node %s: annotation %s: %w", n.Name, AnnotationState, err)
	}
	return Request{Policy: rec.Policy, Step: rec.Step, Action: rec.Action, Since: rec.StepSince, Drain: rec.Drain, FenceBootID: rec.FenceBootID}, true, nil
}

// AnnotationLast records a node's last repair that ended done: its policy,
// the step it ended at and when, so that a fault that comes back within the
// policy's recurrenceWindow resumes higher on the ladder (LastRepair).
const AnnotationLast = "nodeshepherd.io/remediation-last"

// LastRepair is AnnotationLast's JSON.
type LastRepair struct {
	Policy string    `json:"policy"`
	Step   int       `json:"step"`
	Key    string    `json:"key,omitempty"`
	Ended  time.Time `json:"ended"`
}

// LastRepairOf reads the node's last repair under policy (ok false: none,
// another policy's, or unreadable: then the ladder starts at step 1).
func LastRepairOf(n *v1.Node, policy string) (LastRepair, bool) {
	v, ok := n.Annotations[AnnotationLast]
	if !ok {
		return LastRepair{}, false
	}
	var l LastRepair
	if err := json.Unmarshal([]byte(v), &l); err != nil || l.Policy != policy || l.Ended.IsZero() {
		return LastRepair{}, false
	}
	return l, true
}

// Encode is AnnotationLast's value.
func (l LastRepair) Encode() string {
	b, _ := json.Marshal(l)
	return string(b)
}

// SameRecord says whether a and b hold the same repair record (or both
// none): the same policy, step and times, whatever its expiry (a renewal is
// no change of place on the ladder). A malformed record is the same only
// as one written identically.
func SameRecord(a, b *v1.Node) bool {
	sa, oka := a.Annotations[AnnotationState]
	sb, okb := b.Annotations[AnnotationState]
	if !oka || !okb || sa == sb {
		return oka == okb && sa == sb
	}
	ra, erra := parseState(sa)
	rb, errb := parseState(sb)
	if erra != nil || errb != nil {
		return false
	}
	ra.Expires, rb.Expires = nil, nil
	return ra.Policy == rb.Policy && ra.Step == rb.Step && ra.Action == rb.Action && ra.Key == rb.Key &&
		ra.StepSince.Equal(rb.StepSince) && ra.RepairSince.Equal(rb.RepairSince) && ra.BootID == rb.BootID &&
		ra.Drain == rb.Drain && ra.FenceBootID == rb.FenceBootID && ra.ResumeAt == rb.ResumeAt && ra.MachineOff == rb.MachineOff
}
