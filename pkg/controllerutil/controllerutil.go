// Package controllerutil holds what nodeshepherd's controllers share: dry-run
// reporting, taint writes with optimistic locking, and a view of objects that
// includes the controller's own writes before its informer has seen them.
package controllerutil

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
)

// UpdateTaintBackoff is upstream's retry schedule for taint writes.
var UpdateTaintBackoff = wait.Backoff{Steps: 5, Duration: 100 * time.Millisecond, Jitter: 1.0}

// sameTaint compares taints by key, value and effect, ignoring time added.
func sameTaint(a, b *v1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

// ChangeTaints computes the node's taints with add (stamped with now unless
// it carries a timeAdded, replacing a taint of the same key and effect that
// differs) and without remove (by key and effect). It reports whether
// anything changed.
func ChangeTaints(taints []v1.Taint, add, remove []v1.Taint, now time.Time) ([]v1.Taint, bool) {
	out := make([]v1.Taint, 0, len(taints)+len(add))
	changed := false
outer:
	for _, t := range taints {
		for _, r := range remove {
			if t.Key == r.Key && t.Effect == r.Effect {
				changed = true
				continue outer
			}
		}
		for _, a := range add {
			if t.Key == a.Key && t.Effect == a.Effect && !sameTaint(&t, &a) {
				changed = true
				continue outer
			}
		}
		out = append(out, t)
	}
	for _, a := range add {
		found := false
		for _, t := range out {
			if sameTaint(&t, &a) {
				found = true
			}
		}
		if !found {
			if a.TimeAdded == nil { // a taint restored as it was keeps its own
				a.TimeAdded = &metav1.Time{Time: now}
			}
			out = append(out, a)
			changed = true
		}
	}
	return out, changed
}

// TaintChange computes the taints to add and remove for a node, from the
// node as it is at the time of each write attempt.
type TaintChange func(node *v1.Node) (add, remove []v1.Taint)

// TaintOwner gives the owner record (package owner) of a taint the
// controller adds to a node, as the node is at the write; Since is filled in
// from the taint's timeAdded.
type TaintOwner func(node *v1.Node, t v1.Taint) owner.Record

// PatchTaints writes a node's taints with its resourceVersion as a
// precondition, re-reading the node from the API server on conflict, so a
// concurrent writer is never overwritten. get returns the node to start from
// (the controller's freshest view); the written node is returned, or nil when
// nothing needed to change. The same patch writes the owner records: own's
// for the taints added, none for those removed.
func PatchTaints(ctx context.Context, client kubernetes.Interface, name string, get func() (*v1.Node, error),
	change TaintChange, now time.Time, own TaintOwner) (*v1.Node, error) {
	var written *v1.Node
	first := true
	err := retry.RetryOnConflict(UpdateTaintBackoff, func() error {
		var node *v1.Node
		var err error
		if first {
			node, err = get()
			first = false
		} else {
			node, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		add, remove := change(node)
		taints, changed := ChangeTaints(node.Spec.Taints, add, remove, now)
		if !changed {
			written = nil
			return nil
		}
		meta := map[string]any{"resourceVersion": node.ResourceVersion}
		if recs, ok := ownerRecords(node, taints, add, remove, own); ok {
			meta["annotations"] = map[string]any{owner.Annotation: recs}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": meta,
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return err
		}
		written, err = client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("updating taints of node %s: %w", name, err)
	}
	return written, nil
}

// ownerRecords computes the owners annotation after a taint change: a
// record for each taint added (now in taints), none for each removed. It
// returns the new value (nil: remove the annotation) and whether it changed.
func ownerRecords(node *v1.Node, taints, add, remove []v1.Taint, own TaintOwner) (any, bool) {
	m := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	before, had := node.Annotations[owner.Annotation]
	if had {
		m.Annotations[owner.Annotation] = before
	}
	for _, r := range remove {
		owner.Remove(m, owner.TaintKey(r))
	}
	if own != nil {
		for _, a := range add {
			var t *v1.Taint
			for i := range taints {
				if taints[i].Key == a.Key && taints[i].Effect == a.Effect {
					t = &taints[i]
				}
			}
			if t == nil {
				continue
			}
			// timeAdded is stored to the second: the record says what
			// the taint will say.
			var added time.Time
			if t.TimeAdded != nil {
				added = t.TimeAdded.Rfc3339Copy().Time
			}
			if rec, ok := owner.Of(m, owner.TaintKey(*t)); ok && !added.IsZero() && rec.Since.Equal(added) {
				continue // the same taint, already recorded
			}
			rec := own(node, *t)
			if !added.IsZero() {
				rec.Since = added
			}
			owner.Set(m, owner.TaintKey(*t), rec)
		}
	}
	after, has := m.Annotations[owner.Annotation]
	switch {
	case has == had && after == before:
		return nil, false
	case !has:
		return nil, true
	}
	return after, true
}

// Overlay remembers objects a controller wrote (or, in dry-run, would have
// written) until its informer delivers a newer version, so that a pass right
// after a write does not act on the stale cached copy again.
type Overlay[T metav1.Object] struct {
	mu    sync.Mutex
	items map[string]overlayItem[T]
}

type overlayItem[T metav1.Object] struct {
	// older are the resourceVersions obj supersedes: the version each write
	// of a chain started from. While the informer still holds one of them,
	// obj is the truth.
	older map[string]bool
	obj   T
}

// NewOverlay returns an empty overlay.
func NewOverlay[T metav1.Object]() *Overlay[T] {
	return &Overlay[T]{items: map[string]overlayItem[T]{}}
}

// Put records obj as the result of changing the version basedOn. Writes in
// a row (each based on the previous result) form a chain, so that the
// informer's copy from before the first write does not hide the last one.
func (o *Overlay[T]) Put(key, basedOn string, obj T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	older := map[string]bool{basedOn: true}
	if it, ok := o.items[key]; ok && it.obj.GetResourceVersion() == basedOn {
		for rv := range it.older {
			older[rv] = true
		}
	}
	o.items[key] = overlayItem[T]{older: older, obj: obj}
}

// Latest returns the overlay's copy while cached is still a version the
// writes started from, and cached otherwise.
func (o *Overlay[T]) Latest(key string, cached T) T {
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok := o.items[key]
	if !ok {
		return cached
	}
	if it.older[cached.GetResourceVersion()] {
		return it.obj // also a dry-run "write", which keeps the version it started from
	}
	if c, w, ok := revisions(cached, it.obj); ok && c < w {
		// etcd revisions: someone else wrote between the version our write
		// started from and our write; the informer has not reached ours yet.
		return it.obj
	}
	delete(o.items, key)
	return cached
}

// revisions reads two resourceVersions as the etcd revisions they are on
// every kube-apiserver backed by etcd; ok is false for any other storage,
// where only exact matches are trusted.
func revisions(cached, written metav1.Object) (c, w uint64, ok bool) {
	c, err1 := strconv.ParseUint(cached.GetResourceVersion(), 10, 64)
	w, err2 := strconv.ParseUint(written.GetResourceVersion(), 10, 64)
	return c, w, err1 == nil && err2 == nil
}

// Forget drops an entry (the object was deleted).
func (o *Overlay[T]) Forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.items, key)
}

// NodeEvent records an event on a node (nil recorder: nothing). Events on
// nodes reference the node by name and UID, as kubectl describe expects.
func NodeEvent(rec record.EventRecorder, n *v1.Node, typ, reason, msg string) {
	if rec != nil {
		rec.Event(&v1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}, typ, reason, msg)
	}
}

// ProcessNext takes one key off a work queue and syncs it: a key synced
// without error is forgotten, a failed one is reported to HandleError
// (failure, with the key under logKey) and requeued with the queue's backoff.
// It returns false once the queue shuts down, so workers loop on it. Every
// controller's workqueue worker has this one shape.
func ProcessNext[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], logKey, failure string, sync func(context.Context, T) error) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, failure, logKey, key)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
