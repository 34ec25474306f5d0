package scheduler

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
)

// prebindClaims is DynamicResources' PreBind: each claim not reserved for
// the pod gets, in order, the delete-protection finalizer and its
// allocation (when the scheduler allocated it), and the pod in reservedFor.
// A write that conflicts is retried on a fresh copy of the claim, as long
// as the claim is still as the cycle decided (unallocated for an
// allocation, allocated for a reservation). It returns the bindings
// written (to undo them if the pod is not bound after all); each one is
// assumed until the informer shows it, and its allocation is no longer in
// flight.
func (s *Scheduler) prebindClaims(ctx context.Context, pod *v1.Pod, node string, bs []claimBinding) ([]claimBinding, error) {
	var written []claimBinding
	defer func() { s.dra.forgetInFlight(bs[len(written):]) }()
	for _, b := range bs {
		ref, err := resourceclaim.BindTo(pod, nil, &b.podClaim)
		if err != nil {
			return written, err
		}
		claim := b.claim.DeepCopy()
		first := true
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if !first {
				fresh, err := boundWrite(ctx, s, "reading resourceclaim "+b.claim.Namespace+"/"+b.claim.Name, func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
					return s.client.ResourceV1().ResourceClaims(b.claim.Namespace).Get(ctx, b.claim.Name, metav1.GetOptions{})
				})
				if err != nil {
					return err
				}
				if fresh.UID != b.claim.UID {
					return fmt.Errorf("resourceclaim %s was replaced", klog.KObj(b.claim))
				}
				claim = fresh
			}
			first = false
			if !s.cache.isAssigned(pod.UID) {
				return errPodGone
			}
			if resourceclaim.IsReservedForPod(pod, claim, false) {
				return nil
			}
			if b.allocation != nil {
				if claim.Status.Allocation != nil {
					return fmt.Errorf("resourceclaim %s got allocated elsewhere", klog.KObj(claim))
				}
				if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
					c := claim.DeepCopy()
					c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
					updated, err := boundWrite(ctx, s, "adding the finalizer of resourceclaim "+klog.KObj(claim).String(), func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
						return s.client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
					})
					if err != nil {
						return err
					}
					claim = updated
				}
				claim = claim.DeepCopy()
				claim.Status.Allocation = b.allocation
			} else if claim.Status.Allocation == nil {
				return fmt.Errorf("resourceclaim %s got deallocated", klog.KObj(claim))
			} else {
				claim = claim.DeepCopy()
			}
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, ref)
			updated, err := boundWrite(ctx, s, "reserving resourceclaim "+klog.KObj(claim).String()+" for pod "+pod.Namespace+"/"+pod.Name, func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
				return s.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
			})
			if err != nil {
				return err
			}
			claim = updated
			return nil
		})
		if err != nil {
			return written, err
		}
		s.dra.assume(claim)
		s.dra.forgetInFlight([]claimBinding{b})
		written = append(written, b)
		klog.FromContext(ctx).V(2).Info("Reserved resource claim for pod", "pod", klog.KObj(pod), "node", node,
			"resourceclaim", klog.KObj(claim), "allocated", b.allocation != nil)
	}
	return written, nil
}

// unreserveClaims undoes prebindClaims for a pod that was not bound: the
// pod leaves reservedFor and, for a claim the scheduler allocated that no
// other consumer reserved meanwhile, the allocation and the finalizer go
// too. Failures are logged: the ResourceClaim controller removes the
// reservations of pods that are gone.
func (s *Scheduler) unreserveClaims(ctx context.Context, pod *v1.Pod, bs []claimBinding) {
	logger := klog.FromContext(ctx)
	for _, b := range bs {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			claim, err := boundWrite(ctx, s, "reading resourceclaim "+klog.KObj(b.claim).String(), func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
				return s.client.ResourceV1().ResourceClaims(b.claim.Namespace).Get(ctx, b.claim.Name, metav1.GetOptions{})
			})
			if err != nil || claim.UID != b.claim.UID {
				return err
			}
			claim = claim.DeepCopy()
			before := len(claim.Status.ReservedFor)
			claim.Status.ReservedFor = slices.DeleteFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
				return r.UID == pod.UID
			})
			deallocate := b.allocation != nil && len(claim.Status.ReservedFor) == 0 && claim.Status.Allocation != nil &&
				equality.Semantic.DeepEqual(claim.Status.Allocation.Devices, b.allocation.Devices)
			if deallocate {
				claim.Status.Allocation = nil
			}
			if before != len(claim.Status.ReservedFor) || deallocate {
				if claim, err = boundWrite(ctx, s, "unreserving resourceclaim "+klog.KObj(claim).String(), func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
					return s.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
				}); err != nil {
					return err
				}
			}
			if deallocate && slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				c := claim.DeepCopy()
				c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == resourceapi.Finalizer })
				if claim, err = boundWrite(ctx, s, "removing the finalizer of resourceclaim "+klog.KObj(c).String(), func(ctx context.Context) (*resourceapi.ResourceClaim, error) {
					return s.client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
				}); err != nil {
					return err
				}
			}
			s.dra.assume(claim)
			return nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Could not undo the reservation of a resource claim", "pod", klog.KObj(pod), "resourceclaim", klog.KObj(b.claim))
		}
	}
}
