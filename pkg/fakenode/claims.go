package fakenode

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
)

// claimRetry is how often a pod whose resource claims are not ready is
// looked at again: like a kubelet, the fake one reads the claims from the
// API server when it prepares a pod, and watches none.
const claimRetry = time.Second

// ReasonFailedPrepareDynamicResources is the reason of the kubelet's event
// when a pod's claims cannot be prepared (the pod is not started).
const ReasonFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// claimsReady does, for a pod not started yet, what the kubelet's DRA
// manager and the drivers' kubelet plugins do before its containers start:
// every claim the pod references must exist (a template's claim is named
// in the pod's status.resourceClaimStatuses by the ResourceClaim
// controller), be the pod's own when it came from a template, be allocated
// and be reserved for the pod. The devices of this node's drivers among
// the claim's results are then prepared: reported in the claim's
// status.devices with a Ready condition, as a driver may. It returns what
// the pod waits for ("" when it may start).
func (m *Manager) claimsReady(ctx context.Context, pod *v1.Pod, n *node) (string, error) {
	claims := m.cfg.Client.ResourceV1().ResourceClaims(pod.Namespace)
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return err.Error(), nil
		}
		if name == nil {
			continue // the ResourceClaim controller decided no claim is needed
		}
		claim, err := claims.Get(ctx, *name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("ResourceClaim %s of pod claim %s not found", *name, pc.Name), nil
		}
		if err != nil {
			return "", err
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return err.Error(), nil
			}
		}
		if claim.Status.Allocation == nil {
			return fmt.Sprintf("ResourceClaim %s is not allocated", *name), nil
		}
		if !resourceclaim.IsReservedForPod(pod, claim, false) {
			return fmt.Sprintf("pod %s(%s) is not allowed to use ResourceClaim %s(%s): not in its status.reservedFor", pod.Name, pod.UID, *name, claim.UID), nil
		}
		if err := m.markPrepared(ctx, claim, n); err != nil {
			return "", fmt.Errorf("reporting the devices of ResourceClaim %s prepared: %w", *name, err)
		}
	}
	return "", nil
}

// markPrepared writes a status.devices entry, condition Ready True, for
// each device of this node's drivers allocated to the claim, unless it is
// there already. Other drivers' entries are left alone; a conflict reads
// the claim again.
func (m *Manager) markPrepared(ctx context.Context, claim *resourceapi.ResourceClaim, n *node) error {
	now := metav1.NewTime(m.cfg.Clock.Now())
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if claim, err = m.cfg.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		updated, changed := withPreparedDevices(claim, n.name, n.devices, now)
		if !changed {
			return nil
		}
		_, err := m.cfg.Client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err == nil {
			klog.FromContext(ctx).V(4).Info("Reported the claim's devices prepared", "claim", klog.KObj(claim), "node", n.name)
		}
		return err
	})
}

// withPreparedDevices returns a copy of the claim whose status.devices
// lists as Ready the allocated devices of the node's drivers (pool: the
// node), and whether anything changed.
func withPreparedDevices(claim *resourceapi.ResourceClaim, nodeName string, sets []DeviceSet, now metav1.Time) (*resourceapi.ResourceClaim, bool) {
	if claim.Status.Allocation == nil {
		return claim, false
	}
	out := claim.DeepCopy()
	changed := false
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Pool != nodeName || !slices.ContainsFunc(sets, func(d DeviceSet) bool { return d.Driver == r.Driver }) {
			continue
		}
		i := slices.IndexFunc(out.Status.Devices, func(s resourceapi.AllocatedDeviceStatus) bool {
			return s.Driver == r.Driver && s.Pool == r.Pool && s.Device == r.Device && s.ShareID == nil
		})
		if i < 0 {
			out.Status.Devices = append(out.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
			i = len(out.Status.Devices) - 1
		}
		ready := metav1.Condition{Type: deviceConditionReady, Status: metav1.ConditionTrue, Reason: devicePreparedReason,
			Message: devicePreparedMessage, ObservedGeneration: claim.Generation, LastTransitionTime: now}
		if c := meta.FindStatusCondition(out.Status.Devices[i].Conditions, deviceConditionReady); c != nil && c.Status == metav1.ConditionTrue {
			continue
		}
		meta.SetStatusCondition(&out.Status.Devices[i].Conditions, ready)
		changed = true
	}
	return out, changed
}

// reportClaimsWaiting records, once per new reason, the kubelet's warning
// event on a pod whose claims are not ready.
func (m *Manager) reportClaimsWaiting(ctx context.Context, pod *v1.Pod, n *node, waiting string) {
	m.podsMu.Lock()
	if m.claimWaits == nil {
		m.claimWaits = map[string]string{}
	}
	key := string(pod.UID)
	same := m.claimWaits[key] == waiting
	m.claimWaits[key] = waiting
	m.podsMu.Unlock()
	if same {
		return
	}
	now := metav1.NewTime(m.cfg.Clock.Now())
	ev := &v1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			APIVersion: "v1", ResourceVersion: pod.ResourceVersion},
		Reason: ReasonFailedPrepareDynamicResources, Message: "Failed to prepare dynamic resources: " + waiting,
		Type: v1.EventTypeWarning, Source: v1.EventSource{Component: "kubelet", Host: n.name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1, ReportingController: "kubelet", ReportingInstance: n.name,
	}
	if _, err := m.cfg.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).V(2).Info("Recording the pod's event failed", "pod", klog.KObj(pod), "err", err)
	}
}

// forgetClaimWait drops a pod's last reported reason.
func (m *Manager) forgetClaimWait(pod *v1.Pod) {
	m.podsMu.Lock()
	delete(m.claimWaits, string(pod.UID))
	m.podsMu.Unlock()
}
