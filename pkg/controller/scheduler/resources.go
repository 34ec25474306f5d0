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
	// request counts init containers, sidecars and overhead as the kubelet
	// admits them (component-helpers' PodRequests).
	request resources
	// nonZero is the request with 100m/200Mi for containers that set none,
	// for scoring.
	nonZero resources
	ports   []portKey
	// affinity holds the parsed pod (anti-)affinity terms; nil without.
	affinity *podAffinity
}

func newPodInfo(pod *v1.Pod) *podInfo {
	pi := &podInfo{pod: pod, priority: corev1helpers.PodPriority(pod), affinity: parsePodAffinity(pod)}
	pi.request = fromList(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
	nz := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{NonMissingContainerRequests: nonZeroDefaults})
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
