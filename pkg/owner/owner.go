// Package owner records on the Node who wrote each cordon and taint that
// nodeshepherd writes: which controller, why, since when and until when
// (issue 32). The record lives in one annotation, nodeshepherd.io/owners, a
// JSON object keyed by what it owns ("cordon", or a taint as
// "key:effect"), so that `kubectl get node -o yaml` and `explain node` show
// it. A cordon or taint without a record is someone else's (a person,
// kubectl, kured, Karpenter): nodeshepherd never lifts those.
//
// Every writer changes the record in the same write as the taint or cordon
// it describes, with the Node's resourceVersion as a precondition, so two
// controllers writing their records at once never lose one.
//
// A record may expire (Expires): its owner renews it while it runs
// (RenewDue), so only the record of a controller that no longer runs (taken
// out of --controllers, its process gone) reaches its expiry; then another
// nodeshepherd process lifts it with what it owns (package janitor). The
// drain's cordon and the remediation's taints expire; taints that state a
// fact about the node (nodelifecycle's, cloudnodelifecycle's) or that only
// a judgement of the machine may lift (outofservice's) have no expiry.
package owner

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Annotation holds the records.
const Annotation = "nodeshepherd.io/owners"

// Cordon is the key of the record of spec.unschedulable.
const Cordon = "cordon"

// Record says who owns one cordon or taint, and why.
type Record struct {
	// Controller is the nodeshepherd controller that wrote it.
	Controller string `json:"controller"`
	// Why it was written, with the facts (conditions, confirmations).
	Why string `json:"why"`
	// Since is when it was written.
	Since time.Time `json:"since"`
	// Until says what ends it: what the owner waits for before lifting it.
	Until string `json:"until"`
	// Expires is when it ends at the latest, where an expiry applies.
	Expires *time.Time `json:"expires,omitempty"`
}

// Lease is how long a record with an expiry lasts unless its owner renews
// it. An hour: far above any pause of a live owner (a leader change, an API
// server outage of minutes), which renews with half of it still left, and
// short enough that a controller taken out of --controllers leaves no
// cordon behind for a day.
const Lease = time.Hour

// ExpiresAt is the expiry of a record written or renewed at now: now plus
// Lease, rounded up to the second (people read the annotation at that
// precision, and no lease may be shorter than Lease).
func ExpiresAt(now time.Time) time.Time {
	t := now.Add(Lease).UTC().Round(0) // no monotonic reading: it is written out
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

// Expired says whether the record's expiry has passed at now; a record
// without one never expires.
func (r Record) Expired(now time.Time) bool { return r.Expires != nil && !now.Before(*r.Expires) }

// RenewAt is when the owner renews the record: once less than half of Lease
// is left. A record without an expiry (written before expiries existed) is
// due at once (zero), so that it expires too should its owner stop.
func (r Record) RenewAt() time.Time {
	if r.Expires == nil {
		return time.Time{}
	}
	return r.Expires.Add(-Lease / 2)
}

// RenewDue says whether the owner renews the record at now (RenewAt).
func (r Record) RenewDue(now time.Time) bool { return r.Expires == nil || !now.Before(r.RenewAt()) }

// Renewed is the record with its expiry moved to ExpiresAt(now).
func (r Record) Renewed(now time.Time) Record {
	t := ExpiresAt(now)
	r.Expires = &t
	return r
}

// TaintKey is the record key of a taint: key:effect, as kubectl taint
// names it (the value is not part of a taint's identity).
func TaintKey(t v1.Taint) string { return t.Key + ":" + string(t.Effect) }

// Read returns the node's records. A malformed annotation is an error
// (with the records it held lost); no annotation is none.
func Read(n *v1.Node) (map[string]Record, error) {
	s, ok := n.Annotations[Annotation]
	if !ok || s == "" {
		return map[string]Record{}, nil
	}
	return Parse(s)
}

// Parse reads the annotation's value.
func Parse(s string) (map[string]Record, error) {
	out := map[string]Record{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return map[string]Record{}, fmt.Errorf("annotation %s: %w", Annotation, err)
	}
	if out == nil { // "null"
		out = map[string]Record{}
	}
	for k, r := range out {
		if k == "" || r.Controller == "" {
			return map[string]Record{}, fmt.Errorf("annotation %s: record %q names no controller", Annotation, k)
		}
	}
	return out, nil
}

// Of returns the record of key, if the node has one.
func Of(n *v1.Node, key string) (Record, bool) {
	recs, _ := Read(n)
	r, ok := recs[key]
	return r, ok
}

// Set writes the record of key on n (n is changed). A malformed annotation
// is replaced: its records were unreadable anyway.
func Set(n *v1.Node, key string, r Record) {
	recs, _ := Read(n)
	recs[key] = r
	write(n, recs)
}

// Remove drops the record of key from n (n is changed), if there is one.
func Remove(n *v1.Node, key string) {
	recs, err := Read(n)
	if _, ok := recs[key]; !ok && err == nil {
		return
	}
	delete(recs, key)
	write(n, recs)
}

// Lift takes off n what the record of key owns, the cordon or the taint
// key:effect, together with the record (n is changed). Only the owner of
// the record, or whoever lifts it once it expired, calls it: a cordon or
// taint without a record is someone else's.
func Lift(n *v1.Node, key string) {
	if key == Cordon {
		n.Spec.Unschedulable = false
	} else {
		kept := n.Spec.Taints[:0:0]
		for _, t := range n.Spec.Taints {
			if TaintKey(t) != key {
				kept = append(kept, t)
			}
		}
		n.Spec.Taints = kept
	}
	Remove(n, key)
}

func write(n *v1.Node, recs map[string]Record) {
	if len(recs) == 0 {
		delete(n.Annotations, Annotation)
		return
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[Annotation] = Encode(recs)
}

// Encode writes records as the annotation's value (keys sorted, so that an
// unchanged set of records is an unchanged string).
func Encode(recs map[string]Record) string {
	b, _ := json.Marshal(recs) // encoding/json sorts map keys
	return string(b)
}

// Keys returns the record keys in order, for messages.
func Keys(recs map[string]Record) []string {
	out := make([]string, 0, len(recs))
	for k := range recs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
