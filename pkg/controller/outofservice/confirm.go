package outofservice

import (
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// A person's confirmation is about the machine as it was when the person
// wrote it: one boot. When the controller meets a confirmation without a
// recorded boot (AnnotationConfirmationBootID), it records the node's
// current boot only if it can show that the confirmation was written
// during that boot; otherwise the confirmation counts for nothing (the
// machine may have booted again between the confirmation and now, say while
// the controller was not running). Two ways show it:
//
//  1. This process saw the node without the confirmation while it reported
//     the boot it reports now: the confirmation was added after, and the
//     boot has not changed since (boot IDs never repeat).
//  2. The node is silent (Ready Unknown, set by a node lifecycle
//     controller once the kubelet stopped posting), and the confirmation
//     was written (the time of the one managedFields entry that owns it,
//     an entry that owns nothing else) in a later second than the silence
//     began. The boot ID is posted by the kubelet, and no kubelet has
//     posted since the silence began (a post sets Ready True or False), so
//     the current boot was reported before the confirmation was written.
//     The silence's time comes from the node lifecycle controller's clock,
//     the write's from the API server's: a skew between them would have to
//     exceed the grace period to matter (the boot's last post is at least
//     that long before the silence).

// sighting is a node as seen without a person's confirmation.
type sighting struct {
	uid  types.UID
	boot string
}

// observe records the boot of a node seen without a person's confirmation
// (every informer event, before its node is queued).
func (c *Controller) observe(n *v1.Node) {
	if _, ok := n.Annotations[AnnotationConfirm]; ok {
		return
	}
	c.mu.Lock()
	c.unconfirmed[n.Name] = sighting{uid: n.UID, boot: n.Status.NodeInfo.BootID}
	c.mu.Unlock()
}

// binding says whether a person's confirmation without a recorded boot was
// written during the node's current boot, and how that is known or why
// not, in words for events.
type binding struct {
	ok  bool
	how string
}

// bindConfirmation judges a person's confirmation of n that has no
// recorded boot (see above).
func (c *Controller) bindConfirmation(n *v1.Node) binding {
	boot := n.Status.NodeInfo.BootID
	c.mu.Lock()
	s, seen := c.unconfirmed[n.Name]
	c.mu.Unlock()
	if boot != "" && seen && s.uid == n.UID && s.boot == boot {
		return binding{ok: true, how: fmt.Sprintf("it was added while the node reported boot ID %q, which it still reports", boot)}
	}
	return bindByWriteTime(n)
}

// bindByWriteTime is the second way: the confirmation's write time against
// the start of the node's silence.
func bindByWriteTime(n *v1.Node) binding {
	boot := n.Status.NodeInfo.BootID
	if boot == "" {
		return binding{how: "the node reports no boot ID"}
	}
	written, manager, why := confirmationWritten(n)
	if why != "" {
		return binding{how: why}
	}
	at := written.UTC().Format(time.RFC3339)
	ready := kube.NodeCondition(n, v1.NodeReady)
	if ready == nil || ready.Status != v1.ConditionUnknown {
		status := "no Ready condition"
		if ready != nil {
			status = "Ready " + string(ready.Status)
		}
		return binding{how: fmt.Sprintf("it was written at %s (field manager %s), and the node is not silent (%s), so when its boot ID %q was first reported is unknown",
			at, manager, status, boot)}
	}
	silent := ready.LastTransitionTime.Time
	// Both times have a precision of one second: the write is after the
	// silence only in a later second.
	if !written.Truncate(time.Second).After(silent.Truncate(time.Second)) {
		return binding{how: fmt.Sprintf("it was written at %s (field manager %s), not after the node went silent at %s, so the machine may have booted again since",
			at, manager, silent.UTC().Format(time.RFC3339))}
	}
	return binding{ok: true, how: fmt.Sprintf("it was written at %s (field manager %s), after the node went silent at %s with boot ID %q",
		at, manager, silent.UTC().Format(time.RFC3339), boot)}
}

// confirmationFields are the fields a person's confirmation may be written
// with: the entry that owns it must own nothing else, or its time may be
// another field's write.
var confirmationFields = map[string]bool{".": true, "f:" + AnnotationConfirm: true, "f:" + AnnotationConfirmationBootID: true}

// confirmationWritten is when the confirmation was last written, from the
// node's managedFields (an entry's time is when its manager last changed a
// field it owns): why says why it cannot be known.
func confirmationWritten(n *v1.Node) (at time.Time, manager, why string) {
	var owners []string
	for _, e := range n.ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &set); err != nil {
			continue
		}
		meta, _ := set["f:metadata"].(map[string]any)
		anns, _ := meta["f:annotations"].(map[string]any)
		if _, ok := anns["f:"+AnnotationConfirm]; !ok {
			continue
		}
		owners = append(owners, e.Manager)
		manager = e.Manager
		if e.Time != nil {
			at = e.Time.Time
		}
		alone := len(set) == 1 && len(meta) == 1
		for k := range anns {
			alone = alone && confirmationFields[k]
		}
		if !alone {
			why = fmt.Sprintf("its write time is unknown: field manager %s, which wrote it, has written other fields of the node too", e.Manager)
		} else if e.Time == nil {
			why = fmt.Sprintf("its write time is unknown: the managedFields entry of %s has no time", e.Manager)
		}
	}
	switch {
	case len(owners) == 0:
		return time.Time{}, "", "its write time is unknown: no managedFields entry owns it"
	case len(owners) > 1:
		return time.Time{}, "", fmt.Sprintf("its write time is unknown: field managers %v all own it", owners)
	}
	return at, manager, why
}
