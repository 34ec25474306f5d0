package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
)

// Snapshot is the cluster as `nodeshepherd explain pod` reads it: the
// objects the scheduler's informers would hold, listed once.
type Snapshot struct {
	Nodes []v1.Node
	// Pods are all pods: assigned ones take room on their nodes, pending
	// ones nominated to a node reserve room there.
	Pods       []v1.Pod
	PDBs       []policyv1.PodDisruptionBudget
	Namespaces []v1.Namespace
	// Volumes is nil when the pod uses no claims (see UsesClaims).
	Volumes *VolumeSnapshot
	// DRA is nil when the pod has no resource claims (see
	// UsesResourceClaims).
	DRA *DRASnapshot
	// Taken is when the objects were listed: preemption counts pods not
	// started yet as started then.
	Taken time.Time
}

// VolumeSnapshot holds the storage objects the volume filters read.
type VolumeSnapshot struct {
	PersistentVolumeClaims []v1.PersistentVolumeClaim
	PersistentVolumes      []v1.PersistentVolume
	StorageClasses         []storagev1.StorageClass
	CSINodes               []storagev1.CSINode
	CSIDrivers             []storagev1.CSIDriver
	CSIStorageCapacities   []storagev1.CSIStorageCapacity
	VolumeAttachments      []storagev1.VolumeAttachment
}

// NodeFit is one node's answer to a pod: the filter reasons as
// kube-scheduler words them. PreemptionMayHelp is true when removing pods
// from the node could make room (resources, ports, spread, anti-affinity).
type NodeFit struct {
	Node              string   `json:"node"`
	Fits              bool     `json:"fits"`
	Reasons           []string `json:"reasons,omitempty"`
	PreemptionMayHelp bool     `json:"preemptionMayHelp,omitempty"`
}

// Victim is a pod preemption would delete.
type Victim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Priority  int32  `json:"priority"`
}

// FitReport is what a scheduling cycle would conclude for a pod now,
// without acting on it.
type FitReport struct {
	// Nodes in name order.
	Nodes []NodeFit `json:"nodes"`
	// Refused is set when the scheduler would not evaluate the pod at all
	// (unsupported features, invalid affinity); Nodes is then empty.
	Refused string `json:"refused,omitempty"`
	// Message is the PodScheduled message a failed cycle writes, "0/N
	// nodes are available: ... preemption: ...", empty when a node fits.
	Message string `json:"message,omitempty"`
	// PreemptionNode and Victims are preemption's choice when it would
	// preempt; the node it picks among equals is random.
	PreemptionNode string   `json:"preemptionNode,omitempty"`
	Victims        []Victim `json:"victims,omitempty"`
}

// UsesClaims is true for a pod with PersistentVolumeClaim or ephemeral
// volumes: explaining it needs a VolumeSnapshot.
func UsesClaims(pod *v1.Pod) bool { return usesClaims(pod) }

// UsesResourceClaims is true for a pod with spec.resourceClaims: explaining
// it needs a DRASnapshot.
func UsesResourceClaims(pod *v1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// DRASnapshot holds the resource objects DynamicResources reads: every
// ResourceClaim (the allocated ones hold devices), ResourceSlice,
// DeviceClass and DeviceTaintRule.
type DRASnapshot struct {
	ResourceClaims   []resourceapi.ResourceClaim
	ResourceSlices   []resourceapi.ResourceSlice
	DeviceClasses    []resourceapi.DeviceClass
	DeviceTaintRules []resourceapi.DeviceTaintRule
}

// env builds DynamicResources' listers over the snapshot.
func (s *DRASnapshot) env() *draEnv {
	if s == nil {
		return nil
	}
	return &draEnv{claims: resourcelisters.NewResourceClaimLister(indexOf(s.ResourceClaims)),
		slices:   resourcelisters.NewResourceSliceLister(indexOf(s.ResourceSlices)),
		classes:  resourcelisters.NewDeviceClassLister(indexOf(s.DeviceClasses)),
		rules:    resourcelisters.NewDeviceTaintRuleLister(indexOf(s.DeviceTaintRules)),
		celCache: cel.NewCache(10, cel.Features{}),
		inFlight: map[types.UID]*resourceapi.ResourceClaim{}, assumed: map[types.UID]*resourceapi.ResourceClaim{}}
}

// Explain runs the scheduler's filters for pod against every node of the
// snapshot, and, when no node fits, preemption's dry run, with the
// scheduler's default settings. Nothing is written or changed: it is the
// read-only twin of a scheduling cycle, for `nodeshepherd explain pod`.
func Explain(ctx context.Context, pod *v1.Pod, snap Snapshot) (*FitReport, error) {
	return ExplainWith(ctx, pod, snap, DefaultConfig())
}

// ExplainWith is Explain with the scheduler's settings cfg: those that
// decide whether a node fits (NodeResourcesFit's ignored resources, from the
// flags or cfg.KubeSchedulerConfig's profile for cfg.SchedulerName; the
// default spread constraints) and preemption's candidates. cfg must be
// valid (Validate).
func ExplainWith(ctx context.Context, pod *v1.Pod, snap Snapshot, cfg Config) (*FitReport, error) {
	fit, err := cfg.fitArgs()
	if err != nil {
		return nil, err
	}
	c := newCache()
	for i := range snap.Nodes {
		c.setNode(&snap.Nodes[i])
	}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		switch {
		case p.UID == pod.UID:
		case p.Spec.NodeName != "":
			if !terminal(p) {
				c.setPod(p)
			}
		case p.DeletionTimestamp == nil && p.Spec.SchedulerName == pod.Spec.SchedulerName && p.Status.NominatedNodeName != "":
			// Only the scheduler that nominated a pod honours its
			// reservation, as the scheduler's own informer handler does.
			c.nominate(newPodInfo(p), p.Status.NominatedNodeName)
		}
	}
	pi := newPodInfo(pod)
	c.nominate(pi, pod.Status.NominatedNodeName)

	report := &FitReport{Nodes: []NodeFit{}}
	var volumes *volumeEnv
	if snap.Volumes != nil {
		volumes = snap.Volumes.env()
	}
	dra := snap.DRA.env()
	refused := unsupported(pod, volumes != nil, dra != nil)
	if refused == "" {
		refused = volumes.unsupportedVolumes(pod)
	}
	if refused == "" {
		refused = dra.extendedResourceRefusal(pi)
	}
	if refused == "" {
		// The scheduler does not try a pod whose claims are not there yet
		// (DynamicResources' PreEnqueue).
		if msg := dra.preEnqueue(pod); msg != "" {
			refused = "not tried yet: " + msg
		}
	}
	if refused != "" {
		report.Refused = refused
		return report, nil
	}
	q, err := newPodQuery(pi)
	if err != nil {
		report.Refused = "pod " + pod.Namespace + "/" + pod.Name + " cannot be scheduled: " + err.Error()
		return report, nil
	}
	q.fit = fit
	draState, draMsg, err := dra.prefilter(ctx, pod)
	if refusal, ok := err.(*draRefusal); ok {
		report.Refused = refusal.msg
		return report, nil
	}
	if err != nil {
		return nil, err
	}
	q.dra = draState
	nsLister := corelisters.NewNamespaceLister(indexOf(snap.Namespaces))

	c.mu.RLock()
	defer c.mu.RUnlock()
	numNodes := len(c.list)
	if numNodes == 0 {
		report.Message = "no nodes available to schedule pods"
		return report, nil
	}
	statuses := make(map[string]status, numNodes)
	preMsg := q.prefilterNamed()
	if preMsg == "" {
		q.volumes, preMsg = volumes.prefilter(pod, c)
	}
	if preMsg == "" {
		preMsg = draMsg
	}
	if preMsg != "" {
		for _, ni := range c.list {
			statuses[ni.name()] = reject(unresolvable, preMsg)
		}
	} else {
		defaults, err := parseSpreadDefaults(cfg.DefaultPodTopologySpread)
		if err != nil {
			return nil, err
		}
		q.interPod = newAffinityState(c, pi, nsLister)
		q.spread = newSpreadState(&spreadEnv{defaults: defaults}, q, c)
		for _, ni := range c.list {
			if q.outside(ni.name()) {
				statuses[ni.name()] = reject(unresolvable, reasonNotNamed)
				continue
			}
			statuses[ni.name()] = c.filterWithNominated(q, ni)
		}
	}
	fitting := false
	for name, st := range statuses {
		fitting = fitting || st.ok()
		report.Nodes = append(report.Nodes, NodeFit{Node: name, Fits: st.ok(), Reasons: st.reasons, PreemptionMayHelp: st.code == unschedulable})
	}
	slices.SortFunc(report.Nodes, func(a, b NodeFit) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	if fitting {
		return report, nil
	}
	if preMsg != "" {
		report.Message = fmt.Sprintf("0/%d nodes are available: %s.", numNodes, preMsg)
	} else {
		report.Message = fitError(numNodes, statuses, "")
	}
	pdbs := make([]*policyv1.PodDisruptionBudget, len(snap.PDBs))
	for i := range snap.PDBs {
		pdbs[i] = &snap.PDBs[i]
	}
	// A fixed seed: the explanation is the same every time it is asked for,
	// where the scheduler would start its dry run at a random node.
	pr := &preemptor{cfg: preemptionConfig{MinCandidateNodesPercentage: cfg.MinCandidateNodesPercentage,
		MinCandidateNodesAbsolute: cfg.MinCandidateNodesAbsolute, Parallelism: cfg.Parallelism},
		c: c, pdbs: pdbs, rand: rand.New(rand.NewSource(1)), now: snap.Taken}
	out := pr.preempt(ctx, q, statuses, numNodes)
	if out.msg != "" {
		report.Message += " " + preemptionTag + out.msg
	}
	if draState != nil && draState.leftOut != "" && draRejected(statuses) {
		report.Message += " " + draState.leftOut
	}
	if out.chosen != nil {
		report.PreemptionNode = out.chosen.node
		for _, v := range out.chosen.victims {
			report.Victims = append(report.Victims, Victim{Namespace: v.pod.Namespace, Name: v.pod.Name, Priority: v.priority})
		}
	}
	return report, nil
}

// env builds listers over the snapshot's storage objects.
func (s *VolumeSnapshot) env() *volumeEnv {
	return &volumeEnv{
		pvcs:        corelisters.NewPersistentVolumeClaimLister(indexOf(s.PersistentVolumeClaims)),
		pvs:         corelisters.NewPersistentVolumeLister(indexOf(s.PersistentVolumes)),
		classes:     storagelisters.NewStorageClassLister(indexOf(s.StorageClasses)),
		csiNodes:    storagelisters.NewCSINodeLister(indexOf(s.CSINodes)),
		drivers:     storagelisters.NewCSIDriverLister(indexOf(s.CSIDrivers)),
		capacities:  storagelisters.NewCSIStorageCapacityLister(indexOf(s.CSIStorageCapacities)),
		attachments: storagelisters.NewVolumeAttachmentLister(indexOf(s.VolumeAttachments)),
		assumedPVs:  map[string]*v1.PersistentVolume{}, assumedPVCs: map[string]*v1.PersistentVolumeClaim{},
	}
}

// indexOf is an informer-style index holding objs, for listers.
func indexOf[T any, PT interface {
	*T
	runtime.Object
}](objs []T) toolscache.Indexer {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for i := range objs {
		_ = idx.Add(PT(&objs[i]))
	}
	return idx
}
