package drain

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mirrorPodAnnotation marks static pods' API mirrors; they cannot be evicted.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// skipReason says why a pod is left on a draining node; "" means evict it.
// Finished pods are left too: they hold nothing.
func (c *Config) skipReason(p *v1.Pod) string {
	if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return "finished"
	}
	if _, ok := p.Annotations[mirrorPodAnnotation]; ok {
		return "mirror pod"
	}
	if p.Annotations[SafeToEvictAnnotation] == "false" {
		return "annotated " + SafeToEvictAnnotation + "=false"
	}
	for _, a := range c.ProtectedPodAnnotations {
		k, want, hasValue := strings.Cut(a, "=")
		if got, ok := p.Annotations[k]; ok && (!hasValue || got == want) {
			return "protected by annotation " + a
		}
	}
	owner := metav1.GetControllerOf(p)
	switch {
	case owner == nil && !c.EvictUnreplicatedPods:
		return "no controller (--evict-unreplicated-pods)"
	case owner != nil && owner.Kind == "DaemonSet" && !c.EvictDaemonSetPods:
		return "DaemonSet pod (--evict-daemonset-pods)"
	case owner != nil && owner.Kind == "StatefulSet" && !c.EvictStatefulSetPods:
		return "StatefulSet pod (--evict-statefulset-pods)"
	}
	if !c.EvictLocalStoragePods {
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir != nil || v.HostPath != nil {
				return "local storage in volume " + v.Name + " (--evict-emptydir-pods)"
			}
		}
	}
	return ""
}

// gracePeriod is min(the pod's termination grace period, --max-grace-period).
func (c *Config) gracePeriod(p *v1.Pod) int64 {
	limit := int64(c.MaxGracePeriod.Seconds())
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g < limit {
		return *g
	}
	return limit
}
