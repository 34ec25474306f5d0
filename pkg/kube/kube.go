// Package kube holds small helpers over Kubernetes objects and clients that
// several nodeshepherd packages share.
package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// WriteTimeout bounds one write (with the reads that prepare it) to the API
// server. client-go sets no timeout, so a request whose answer never comes
// (a connection that hangs, a proxy that stalls) would block the worker that
// sent it for good; after WriteTimeout the write is given up and retried like
// any failed one, and the retry finds out from the object whether the first
// attempt took effect. Far above a healthy write's latency, below
// kube-apiserver's own 60 s request timeout.
const WriteTimeout = 15 * time.Second

// Answered says whether a write's error is the API server's answer to it,
// so that the write did not take effect: a status it returned, other than a
// timeout of its own (504, or 500 with reason Timeout) or an internal error,
// after which the write may still have landed. A transport error or the
// client's deadline (WriteTimeout) is no answer: the write is then re-checked
// against the object or sent again, never taken as done or as failed.
func Answered(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	return !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsInternalError(err) && !apierrors.IsUnexpectedServerError(err)
}

// Fast returns a copy of cfg for local, trusted servers: protobuf and no
// client-side throttling worth noticing.
func Fast(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 1000, 2000
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return c
}

// NodeCondition returns the node's condition of the given type, or nil.
func NodeCondition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeReady says whether the node's Ready condition is True.
func NodeReady(n *v1.Node) bool {
	c := NodeCondition(n, v1.NodeReady)
	return c != nil && c.Status == v1.ConditionTrue
}

// HasTaint says whether the node has a taint with the key.
func HasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// FindTaint returns the node's taint with the same key and effect, or nil.
func FindTaint(n *v1.Node, t v1.Taint) *v1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == t.Key && n.Spec.Taints[i].Effect == t.Effect {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// Untombstone returns the object inside an informer's
// DeletedFinalStateUnknown, or obj itself.
func Untombstone(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// NodeNameHandler calls add with the node's name on every add, update and
// delete (tombstones included): the handler of controllers keyed by node.
func NodeNameHandler(add func(name string)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { add(obj.(*v1.Node).Name) },
		UpdateFunc: func(_, obj any) { add(obj.(*v1.Node).Name) },
		DeleteFunc: func(obj any) {
			if n, ok := Untombstone(obj).(*v1.Node); ok {
				add(n.Name)
			}
		},
	}
}

// PodCondition returns the pod's condition of the given type, or nil.
func PodCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady says whether the pod's Ready condition is True.
func PodReady(p *v1.Pod) bool {
	c := PodCondition(p, v1.PodReady)
	return c != nil && c.Status == v1.ConditionTrue
}

// NotBefore is the latest instant a Kubernetes timestamp may stand for.
// creationTimestamp, condition transition times, taint timeAdded and RFC 3339
// strings are truncated to the second, so the real moment lies in [t, t+1s);
// a wait measured from NotBefore(t) is never shorter than configured. A
// timestamp that carries sub-second digits is taken as exact.
func NotBefore(t time.Time) time.Time {
	if t.IsZero() || t.Nanosecond() != 0 {
		return t
	}
	return t.Add(time.Second)
}

// ParseTime reads an RFC 3339 time written by nodeshepherd (with
// sub-second digits: exact) or at one-second precision (Draino, an API
// server's truncation: rounded up, as the true time lies in [t, t+1s)), so
// that no wait measured from it is shorter than configured.
func ParseTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	if !strings.Contains(s, ".") {
		t = t.Add(time.Second)
	}
	return t, true
}

// PDBSelects says whether a PodDisruptionBudget covers the pod, as the
// Eviction API decides it in policy/v1: same namespace, and a selector that
// matches; an empty selector ({}) selects every pod of the namespace, a
// missing one none.
func PDBSelects(b *policyv1.PodDisruptionBudget, p *v1.Pod) bool {
	if b.Namespace != p.Namespace || b.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(p.Labels))
}

// ReadNodeAfterLostWrite reads a node from the API server, bounded by
// WriteTimeout, to settle a write whose answer was lost: the node as it is
// now, or nil if it is gone. An error means nothing is settled yet.
func ReadNodeAfterLostWrite(ctx context.Context, client kubernetes.Interface, name string) (*v1.Node, error) {
	rctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()
	n, err := client.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node %s again after a write whose answer was lost: %w", name, err)
	}
	return n, nil
}
