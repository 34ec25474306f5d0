package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// resources is a pod's request or a node's allocatable/requested total in
// the units the filters compare: milli-CPU, bytes, and integer counts for
// everything else (extended resources, hugepages, ephemeral storage).
type resources struct {
	milliCPU int64
	memory   int64
	// scalar holds every other resource; nil until one is seen.
	scalar map[v1.ResourceName]int64
}

func (r *resources) add(o *resources, sign int64) {
	r.milliCPU += sign * o.milliCPU
	r.memory += sign * o.memory
	for k, v := range o.scalar {
		if r.scalar == nil {
			r.scalar = map[v1.ResourceName]int64{}
		}
		r.scalar[k] += sign * v
	}
}

func (r resources) clone() resources {
	c := r
	if r.scalar != nil {
		c.scalar = make(map[v1.ResourceName]int64, len(r.scalar))
		for k, v := range r.scalar {
			c.scalar[k] = v
		}
	}
	return c
}

func fromList(l v1.ResourceList) resources {
	var r resources
	for name, q := range l {
		switch name {
		case v1.ResourceCPU:
			r.milliCPU = q.MilliValue()
		case v1.ResourceMemory:
			r.memory = q.Value()
		case v1.ResourcePods:
			// counted by the number of pods, not as a request
		default:
			if r.scalar == nil {
				r.scalar = map[v1.ResourceName]int64{}
			}
			r.scalar[name] = q.Value()
		}
	}
	return r
}

// Defaults kube-scheduler assumes for containers without requests, when
// scoring only (so that best-effort pods still spread).
var nonZeroDefaults = v1.ResourceList{
	v1.ResourceCPU:    resource.MustParse("100m"),
	v1.ResourceMemory: resource.MustParse("200Mi"),
}

// portKey is one host port a pod uses.
type portKey struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

// podInfo is a pod with what the scheduler computes from it once.
type podInfo struct {
	pod      *v1.Pod
	priority int32
	// request counts init containers, sidecars, pod-level resources and
	// overhead as the kubelet admits them (component-helpers' PodRequests),
	// and, for a pod being resized in place, the larger of its spec and
	// what the kubelet has allocated or actuated (its status), as
	// kube-scheduler 1.37 counts pods on a node.
	request resources
	// nonZero is the request as a node counts it for scoring: 100m/200Mi
	// for containers that set none, unless pod-level requests set that
	// resource.
	nonZero resources
	ports   []portKey
	// affinity holds the parsed pod (anti-)affinity terms; nil without.
	affinity *podAffinity
}

// requestOptions are the options kube-scheduler 1.37's NodeInfo computes
// pod requests with (InPlacePodVerticalScaling GA, PodLevelResources and
// InPlacePodLevelResourcesVerticalScaling beta, all on). A pending pod has
// no status resources, so for it they give its spec's requests.
var requestOptions = resourcehelper.PodResourcesOptions{UseStatusResources: true, InPlacePodLevelResourcesVerticalScalingEnabled: true}

func newPodInfo(pod *v1.Pod) *podInfo {
	pi := &podInfo{pod: pod, priority: corev1helpers.PodPriority(pod), affinity: parsePodAffinity(pod)}
	reqs := resourcehelper.PodRequests(pod, requestOptions)
	pi.request = fromList(reqs)
	// Defaults only for what neither containers nor the pod level request,
	// as upstream's NodeInfo does (getNonMissingContainerRequests).
	missing := nonZeroDefaults
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		missing = v1.ResourceList{}
		for name, q := range nonZeroDefaults {
			if _, ok := reqs[name]; !ok {
				missing[name] = q
			}
		}
	}
	nz := reqs
	if len(missing) > 0 {
		opts := requestOptions
		opts.NonMissingContainerRequests = missing
		nz = resourcehelper.PodRequests(pod, opts)
	}
	pi.nonZero = resources{milliCPU: nz.Cpu().MilliValue(), memory: nz.Memory().Value()}
	for i := range pod.Spec.Containers {
		pi.ports = appendPorts(pi.ports, pod.Spec.Containers[i].Ports)
	}
	for i := range pod.Spec.InitContainers {
		// Sidecars (restartable init containers) keep their ports.
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			pi.ports = appendPorts(pi.ports, c.Ports)
		}
	}
	return pi
}

// incomingNonZero is the pod's request for scoring as kube-scheduler
// computes it for the pod being scheduled: 100m/200Mi for every container
// that sets none (pod-level requests still override).
func incomingNonZero(pod *v1.Pod) resources {
	opts := requestOptions
	opts.NonMissingContainerRequests = nonZeroDefaults
	nz := resourcehelper.PodRequests(pod, opts)
	return resources{milliCPU: nz.Cpu().MilliValue(), memory: nz.Memory().Value()}
}

// shrunk reports whether some resource that want requests (any resource
// when want is nil) is smaller in after than in before: a resized assigned
// pod freed room that a pod requesting it may use.
func shrunk(want, before, after *resources) bool {
	if (want == nil || want.milliCPU > 0) && after.milliCPU < before.milliCPU {
		return true
	}
	if (want == nil || want.memory > 0) && after.memory < before.memory {
		return true
	}
	for name, v := range before.scalar {
		if (want == nil || want.scalar[name] > 0) && after.scalar[name] < v {
			return true
		}
	}
	return false
}

func appendPorts(out []portKey, ports []v1.ContainerPort) []portKey {
	for _, p := range ports {
		if p.HostPort <= 0 {
			continue
		}
		ip, proto := p.HostIP, p.Protocol
		if ip == "" {
			ip = "0.0.0.0"
		}
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		out = append(out, portKey{ip: ip, protocol: proto, port: p.HostPort})
	}
	return out
}

// conflicts reports whether two host ports cannot both be bound: same
// protocol and port, and the same IP or either one the wildcard.
func (p portKey) conflicts(o portKey) bool {
	return p.port == o.port && p.protocol == o.protocol && (p.ip == o.ip || p.ip == "0.0.0.0" || o.ip == "0.0.0.0")
}
