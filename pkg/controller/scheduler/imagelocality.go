package scheduler

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ImageLocality's thresholds (kube-scheduler 1.37): images below 23 MiB in
// total score 0; the score reaches 100 at 1000 MiB per image of the pod.
const (
	mib                   int64 = 1024 * 1024
	imageMinThreshold           = 23 * mib
	imageMaxPerContainer        = 1000 * mib
	imageLocalityMaxScore       = maxNodeScore
)

// imageState is one image name across the cluster: its size (as the first
// node that reported it while no other node had it) and how many nodes have
// it. The cache keeps one per name, shared by the nodes that list it, so
// that the spread factor costs nothing per cycle.
type imageState struct {
	size  int64
	nodes int
}

// addNodeImages counts node's images; the node's nodeInfo gets its names.
// Callers hold the cache's write lock.
func (c *cache) addNodeImages(n *nodeInfo, node *v1.Node) {
	n.images = nil
	for _, img := range node.Status.Images {
		for _, name := range img.Names {
			if _, seen := n.images[name]; seen {
				continue // a name listed twice counts its node once
			}
			st := c.images[name]
			if st == nil {
				st = &imageState{size: img.SizeBytes}
				c.images[name] = st
			}
			st.nodes++
			if n.images == nil {
				n.images = map[string]*imageState{}
			}
			n.images[name] = st
		}
	}
}

// removeNodeImages uncounts the node's images, forgetting those no node
// has any more.
func (c *cache) removeNodeImages(n *nodeInfo) {
	for name, st := range n.images {
		if st.nodes--; st.nodes <= 0 {
			delete(c.images, name)
		}
	}
	n.images = nil
}

// normalizedImageName is the name a runtime reports: ":latest" added
// when the reference has no tag (kube-scheduler's normalisation; digests
// and registries are left as written).
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}

// imageQuery is ImageLocality's input for one pod and cycle.
type imageQuery struct {
	// names holds one entry per init container, container and image
	// volume, in that order, normalised (duplicates count each time, as
	// upstream counts them).
	names []string
	// totalNodes is the number of nodes in the cache.
	totalNodes int
}

func newImageQuery(pod *v1.Pod, totalNodes int) imageQuery {
	q := imageQuery{totalNodes: totalNodes}
	for i := range pod.Spec.InitContainers {
		q.names = append(q.names, normalizedImageName(pod.Spec.InitContainers[i].Image))
	}
	for i := range pod.Spec.Containers {
		q.names = append(q.names, normalizedImageName(pod.Spec.Containers[i].Image))
	}
	for i := range pod.Spec.Volumes {
		if v := pod.Spec.Volumes[i].Image; v != nil {
			q.names = append(q.names, normalizedImageName(v.Reference))
		}
	}
	return q
}

// score is ImageLocality's Score: the sizes of the pod's images present on
// the node, each scaled by the share of nodes that have it (so that an
// image everywhere does not pull every pod to one node), clamped between
// 23 MiB and 1000 MiB per image, mapped to 0-100.
func (q imageQuery) score(n *nodeInfo) int64 {
	if len(q.names) == 0 || q.totalNodes == 0 {
		return 0
	}
	var sum int64
	for _, name := range q.names {
		if st := n.images[name]; st != nil {
			spread := float64(st.nodes) / float64(q.totalNodes)
			sum += int64(float64(st.size) * spread)
		}
	}
	maxThreshold := imageMaxPerContainer * int64(len(q.names))
	sum = min(max(sum, imageMinThreshold), maxThreshold)
	return imageLocalityMaxScore * (sum - imageMinThreshold) / (maxThreshold - imageMinThreshold)
}
