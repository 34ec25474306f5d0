package scheduler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// Reasons of kube-scheduler 1.37's volume plugins (VolumeRestrictions,
// NodeVolumeLimits, VolumeBinding, VolumeZone), word for word.
const (
	reasonRWOPConflict     = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
	reasonMaxVolumeCount   = "node(s) exceed max volume count"
	reasonVolumeNodeAff    = "node(s) didn't match PersistentVolume's node affinity"
	reasonBindConflict     = "node(s) didn't find available persistent volumes to bind"
	reasonNotEnoughStorage = "node(s) did not have enough free storage"
	reasonPVNotExist       = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	reasonVolumeZone       = "node(s) had no available volume zone"
	msgUnboundImmediate    = "pod has unbound immediate PersistentVolumeClaims"
)

// volumeEnv is what volume scheduling reads: the storage listers, and the
// bindings decided by scheduling cycles whose API writes the informers have
// not shown yet (kube-scheduler's assume cache), so that the next cycle
// does not hand the same PersistentVolume to another claim.
type volumeEnv struct {
	pvcs        corelisters.PersistentVolumeClaimLister
	pvs         corelisters.PersistentVolumeLister
	classes     storagelisters.StorageClassLister
	csiNodes    storagelisters.CSINodeLister
	drivers     storagelisters.CSIDriverLister
	capacities  storagelisters.CSIStorageCapacityLister
	attachments storagelisters.VolumeAttachmentLister

	mu sync.Mutex
	// assumedPVs and assumedPVCs are modified copies that keep the
	// resourceVersion they were made from: a newer object from the
	// informer replaces them.
	assumedPVs  map[string]*v1.PersistentVolume
	assumedPVCs map[string]*v1.PersistentVolumeClaim
}

func claimKey(ns, name string) string { return ns + "/" + name }

// pvc is the claim, as assumed by a cycle if the informer has nothing newer.
func (e *volumeEnv) pvc(ns, name string) (*v1.PersistentVolumeClaim, error) {
	c, err := e.pvcs.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.assumedPVCs[claimKey(ns, name)]; a != nil {
		if a.ResourceVersion == c.ResourceVersion {
			return a, nil
		}
		delete(e.assumedPVCs, claimKey(ns, name))
	}
	return c, nil
}

func (e *volumeEnv) assumedPV(pv *v1.PersistentVolume) *v1.PersistentVolume {
	if a := e.assumedPVs[pv.Name]; a != nil {
		if a.ResourceVersion == pv.ResourceVersion {
			return a
		}
		delete(e.assumedPVs, pv.Name)
	}
	return pv
}

func (e *volumeEnv) pv(name string) (*v1.PersistentVolume, error) {
	pv, err := e.pvs.Get(name)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.assumedPV(pv), nil
}

// pvsOfClass lists the volumes of a storage class, as assumed.
func (e *volumeEnv) pvsOfClass(class string) ([]*v1.PersistentVolume, error) {
	all, err := e.pvs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*v1.PersistentVolume
	for _, pv := range all {
		if volumehelpers.GetPersistentVolumeClass(pv) == class {
			out = append(out, e.assumedPV(pv))
		}
	}
	return out, nil
}

// assume records a cycle's decisions; forgetAssumed undoes them.
func (e *volumeEnv) assume(b *volumeBindings) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range b.static {
		e.assumedPVs[s.pv.Name] = s.pv
	}
	for _, c := range b.provision {
		e.assumedPVCs[claimKey(c.Namespace, c.Name)] = c
	}
}

func (e *volumeEnv) forgetAssumed(b *volumeBindings) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range b.static {
		if e.assumedPVs[s.pv.Name] == s.pv {
			delete(e.assumedPVs, s.pv.Name)
		}
	}
	for _, c := range b.provision {
		if k := claimKey(c.Namespace, c.Name); e.assumedPVCs[k] == c {
			delete(e.assumedPVCs, k)
		}
	}
}

// claimName is the claim a volume uses: its own, or for a generic
// ephemeral volume <pod>-<volume>; "" for other volumes.
func claimName(pod *v1.Pod, v *v1.Volume) (name string, isEphemeral bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, false
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v), true
	}
	return "", false
}

func usesClaims(pod *v1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if n, _ := claimName(pod, &pod.Spec.Volumes[i]); n != "" {
			return true
		}
	}
	return false
}

func fullyBound(c *v1.PersistentVolumeClaim) bool {
	return c.Spec.VolumeName != "" && metav1.HasAnnotation(c.ObjectMeta, volumehelpers.AnnBindCompleted)
}

// pvTopology is a zone or region label of a bound volume.
type pvTopology struct {
	key    string
	values sets.Set[string]
}

// The labels VolumeZone compares, beta ones matched against the GA ones
// when the node lacks them.
var zoneLabels = []string{v1.LabelFailureDomainBetaZone, v1.LabelFailureDomainBetaRegion, v1.LabelTopologyZone, v1.LabelTopologyRegion}

func gaLabel(key string) string {
	switch key {
	case v1.LabelFailureDomainBetaZone:
		return v1.LabelTopologyZone
	case v1.LabelFailureDomainBetaRegion:
		return v1.LabelTopologyRegion
	}
	return key
}

// volumeState is the volume plugins' view of one pod for one cycle,
// computed once (their PreFilter) and read by the filters of every node in
// parallel.
type volumeState struct {
	env *volumeEnv
	pod *v1.Pod

	// VolumeRestrictions: the pod's ReadWriteOncePod claims, how many of
	// them assigned pods use, and the uses per node (so that a node's
	// changed pod set, in preemption, moves the count).
	rwop       sets.Set[string]
	rwopUsed   int
	rwopOnNode map[string]int

	// NodeVolumeLimits: the pod's attachable volumes (unique name to
	// driver), and the VolumeAttachments per node.
	newVolumes  map[string]string
	attachments map[string]map[string]string

	// VolumeBinding.
	bound      []*v1.PersistentVolumeClaim
	boundPVs   map[string]*v1.PersistentVolume // by name; missing ones absent
	delayed    []*v1.PersistentVolumeClaim     // unbound WaitForFirstConsumer, smallest request first
	pvsByClass map[string][]*v1.PersistentVolume

	// VolumeZone.
	zones []pvTopology

	// mu guards scores: VolumeBinding's score of the nodes that passed
	// its filter, written by the filters running in parallel.
	mu     sync.Mutex
	scores map[string]int64
}

// prefilter runs the volume plugins' PreFilter in kube-scheduler's order.
// A non-empty message makes the pod unschedulable on every node, as
// kube-scheduler reports it ("0/N nodes are available: <message>."). A
// pod without claims gets a nil state.
func (e *volumeEnv) prefilter(pod *v1.Pod, c *cache) (*volumeState, string) {
	if e == nil || !usesClaims(pod) {
		return nil, ""
	}
	st := &volumeState{env: e, pod: pod}
	if msg := st.restrictions(c); msg != "" {
		return nil, msg
	}
	if msg := st.binding(); msg != "" {
		return nil, msg
	}
	if msg := st.zone(); msg != "" {
		return nil, msg
	}
	st.limits()
	return st, ""
}

// restrictions is VolumeRestrictions' PreFilter: the pod's claims must
// exist, and its ReadWriteOncePod claims are counted where assigned pods
// use them.
func (st *volumeState) restrictions(c *cache) string {
	pod := st.pod
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := st.env.pvcs.PersistentVolumeClaims(pod.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return err.Error()
		}
		if slices.Contains(pvc.Spec.AccessModes, v1.ReadWriteOncePod) {
			if st.rwop == nil {
				st.rwop = sets.New[string]()
			}
			st.rwop.Insert(claimKey(pod.Namespace, pvc.Name))
		}
	}
	if st.rwop.Len() == 0 {
		return ""
	}
	used := sets.New[string]()
	st.rwopOnNode = map[string]int{}
	for name, ni := range c.nodes {
		if n := st.rwopRefs(ni.pods, used); n > 0 {
			st.rwopOnNode[name] = n
		}
	}
	st.rwopUsed = used.Len()
	return ""
}

// rwopRefs counts the references of pods to the pod's ReadWriteOncePod
// claims, adding the claims referenced to used when it is not nil.
func (st *volumeState) rwopRefs(pods []*podInfo, used sets.Set[string]) int {
	n := 0
	for _, p := range pods {
		for _, v := range p.pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			if k := claimKey(p.pod.Namespace, v.PersistentVolumeClaim.ClaimName); st.rwop.Has(k) {
				n++
				if used != nil {
					used.Insert(k)
				}
			}
		}
	}
	return n
}

// binding is VolumeBinding's PreFilter: every claim exists, is not lost
// or being deleted (an ephemeral one belongs to the pod), and is bound
// unless its class waits for the first consumer.
func (st *volumeState) binding() string {
	pod := st.pod
	var claims []*v1.PersistentVolumeClaim
	for i := range pod.Spec.Volumes {
		name, isEphemeral := claimName(pod, &pod.Spec.Volumes[i])
		if name == "" {
			continue
		}
		pvc, err := st.env.pvc(pod.Namespace, name)
		if err != nil {
			if isEphemeral && apierrors.IsNotFound(err) {
				return fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", name)
			}
			return err.Error()
		}
		if pvc.Status.Phase == v1.ClaimLost {
			return fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", pvc.Name, pvc.Spec.VolumeName)
		}
		if pvc.DeletionTimestamp != nil {
			return fmt.Sprintf("persistentvolumeclaim %q is being deleted", pvc.Name)
		}
		if isEphemeral {
			if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
				return err.Error()
			}
		}
		claims = append(claims, pvc)
	}
	immediate := false
	for _, pvc := range claims {
		if fullyBound(pvc) {
			st.bound = append(st.bound, pvc)
			continue
		}
		delay, err := volumehelpers.IsDelayBindingMode(pvc, st.env.classes)
		if err != nil {
			return err.Error()
		}
		if delay && pvc.Spec.VolumeName == "" {
			st.delayed = append(st.delayed, pvc)
		} else {
			immediate = true // pre-bound claims too: the PV controller binds them
		}
	}
	if immediate {
		return msgUnboundImmediate
	}
	st.boundPVs = map[string]*v1.PersistentVolume{}
	for _, pvc := range st.bound {
		if pv, err := st.env.pv(pvc.Spec.VolumeName); err == nil {
			st.boundPVs[pv.Name] = pv
		}
	}
	slices.SortStableFunc(st.delayed, func(a, b *v1.PersistentVolumeClaim) int {
		qa, qb := a.Spec.Resources.Requests[v1.ResourceStorage], b.Spec.Resources.Requests[v1.ResourceStorage]
		return qa.Cmp(qb)
	})
	st.pvsByClass = map[string][]*v1.PersistentVolume{}
	for _, pvc := range st.delayed {
		class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
		if _, ok := st.pvsByClass[class]; ok {
			continue
		}
		pvs, err := st.env.pvsOfClass(class)
		if err != nil {
			return err.Error()
		}
		st.pvsByClass[class] = pvs
	}
	return ""
}

// zone is VolumeZone's PreFilter: the zone and region labels of the bound
// volumes of the pod's persistentVolumeClaim volumes.
func (st *volumeState) zone() string {
	pod := st.pod
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if v.PersistentVolumeClaim.ClaimName == "" {
			return "PersistentVolumeClaim had no name"
		}
		pvc, err := st.env.pvcs.PersistentVolumeClaims(pod.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return err.Error()
		}
		if pvc.Spec.VolumeName == "" {
			class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
			if class == "" {
				return "PersistentVolumeClaim had no pv name and storageClass name"
			}
			sc, err := st.env.classes.Get(class)
			if err != nil {
				return err.Error()
			}
			if sc.VolumeBindingMode == nil {
				return fmt.Sprintf("VolumeBindingMode not set for StorageClass %q", class)
			}
			if *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
				continue
			}
			return "PersistentVolume had no name"
		}
		pv, err := st.env.pvs.Get(pvc.Spec.VolumeName)
		if err != nil {
			return err.Error()
		}
		for _, key := range zoneLabels {
			value, ok := pv.Labels[key]
			if !ok {
				continue
			}
			values, ok := labelZones(value)
			if !ok {
				continue // kube-scheduler ignores a malformed label
			}
			st.zones = append(st.zones, pvTopology{key: key, values: values})
		}
	}
	return ""
}

// labelZones splits a multi-zone label value ("a__b"); false if a part is
// empty.
func labelZones(value string) (sets.Set[string], bool) {
	out := sets.New[string]()
	for _, z := range strings.Split(value, "__") {
		z = strings.TrimSpace(z)
		if z == "" {
			return nil, false
		}
		out.Insert(z)
	}
	return out, true
}

// limits is NodeVolumeLimits' preparation: the attachable volumes of the
// pod (CSI volumes, by driver and handle; an unbound claim counts as a new
// volume of its class's provisioner), and the nodes' VolumeAttachments.
func (st *volumeState) limits() {
	st.newVolumes = st.env.attachable(st.pod)
	if len(st.newVolumes) == 0 || st.env.attachments == nil {
		return
	}
	vas, err := st.env.attachments.List(labels.Everything())
	if err != nil {
		return
	}
	st.attachments = map[string]map[string]string{}
	for _, va := range vas {
		if va.Spec.Attacher == "" || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := st.env.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		m := st.attachments[va.Spec.NodeName]
		if m == nil {
			m = map[string]string{}
			st.attachments[va.Spec.NodeName] = m
		}
		m[va.Spec.Attacher+"/"+pv.Spec.CSI.VolumeHandle] = va.Spec.Attacher
	}
}

// unboundHandle prefixes the made-up handle of a volume not provisioned
// yet; no real handle starts with a NUL.
const unboundHandle = "\x00unbound-"

// attachable maps the unique names (driver/handle) of a pod's CSI volumes
// to their drivers. Claims that cannot be looked up are not counted.
func (e *volumeEnv) attachable(pod *v1.Pod) map[string]string {
	out := map[string]string{}
	for i := range pod.Spec.Volumes {
		name, isEphemeral := claimName(pod, &pod.Spec.Volumes[i])
		if name == "" {
			continue
		}
		pvc, err := e.pvcs.PersistentVolumeClaims(pod.Namespace).Get(name)
		if err != nil {
			continue
		}
		if isEphemeral && ephemeral.VolumeIsForPod(pod, pvc) != nil {
			continue
		}
		driver, handle := e.csiVolume(pvc)
		if driver == "" || handle == "" {
			continue
		}
		out[driver+"/"+handle] = driver
	}
	return out
}

// csiVolume is a claim's CSI driver and volume handle: its bound PV's, or
// for an unbound claim (or a missing PV) its class's provisioner and a
// made-up handle. In-tree volume types are not translated to CSI.
func (e *volumeEnv) csiVolume(pvc *v1.PersistentVolumeClaim) (string, string) {
	if pvc.Spec.VolumeName != "" {
		if pv, err := e.pvs.Get(pvc.Spec.VolumeName); err == nil {
			if pv.Spec.CSI == nil {
				return "", ""
			}
			return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
		}
	}
	class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	if class == "" {
		return "", ""
	}
	sc, err := e.classes.Get(class)
	if err != nil {
		return "", ""
	}
	return sc.Provisioner, unboundHandle + pvc.Namespace + "/" + pvc.Name
}

// filter runs VolumeRestrictions, NodeVolumeLimits, VolumeBinding and
// VolumeZone on a node, in kube-scheduler's order.
func (st *volumeState) filter(n *nodeInfo) status {
	if st == nil {
		return status{}
	}
	if st.rwop.Len() > 0 && st.rwopUsed+st.rwopRefs(n.pods, nil)-st.rwopOnNode[n.name()] > 0 {
		// Removing the pods that use the claim (preemption) can help.
		return reject(unschedulable, reasonRWOPConflict)
	}
	if s := st.limitsFilter(n); !s.ok() {
		return s
	}
	b, reasons, err := st.findVolumes(n.node)
	if err != nil {
		return reject(unresolvable, err.Error())
	} else if len(reasons) > 0 {
		return reject(unresolvable, reasons...)
	}
	if b.score != 0 {
		// Filters run in parallel; the score reads it after them.
		st.mu.Lock()
		if st.scores == nil {
			st.scores = map[string]int64{}
		}
		st.scores[n.name()] = b.score
		st.mu.Unlock()
	}
	return st.zoneFilter(n.node)
}

func (st *volumeState) limitsFilter(n *nodeInfo) status {
	if len(st.newVolumes) == 0 {
		return status{}
	}
	csiNode, _ := st.env.csiNodes.Get(n.name())
	for _, driver := range st.newVolumes {
		if !st.driverInstalled(driver, csiNode) {
			return reject(unschedulable, driver+" CSI driver is not installed on the node")
		}
	}
	limits := map[string]int{}
	if csiNode != nil {
		for _, d := range csiNode.Spec.Drivers {
			if d.Allocatable != nil && d.Allocatable.Count != nil {
				limits[d.Name] = int(*d.Allocatable.Count)
			}
		}
	}
	if len(limits) == 0 {
		return status{}
	}
	attached := map[string]string{}
	for _, p := range n.pods {
		for k, d := range st.env.attachable(p.pod) {
			attached[k] = d
		}
	}
	count := map[string]int{}
	for _, d := range attached {
		count[d]++
	}
	for k, d := range st.attachments[n.name()] {
		if _, ok := attached[k]; !ok {
			count[d]++
		}
	}
	adding := map[string]int{}
	for k, d := range st.newVolumes {
		if _, ok := attached[k]; !ok {
			adding[d]++
		}
	}
	for d, c := range adding {
		if limit, ok := limits[d]; ok && count[d]+c > limit {
			return reject(unschedulable, reasonMaxVolumeCount)
		}
	}
	return status{}
}

// driverInstalled is false for a driver whose CSIDriver asks that pods
// wait for it (preventPodSchedulingIfMissing) and that the node's CSINode
// does not list.
func (st *volumeState) driverInstalled(driver string, csiNode *storagev1.CSINode) bool {
	if st.env.drivers == nil {
		return true
	}
	d, err := st.env.drivers.Get(driver)
	if err != nil || d.Spec.PreventPodSchedulingIfMissing == nil || !*d.Spec.PreventPodSchedulingIfMissing {
		return true
	}
	if csiNode == nil {
		return false
	}
	return slices.ContainsFunc(csiNode.Spec.Drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == driver })
}

func (st *volumeState) zoneFilter(node *v1.Node) status {
	if len(st.zones) == 0 || !slices.ContainsFunc(zoneLabels, func(k string) bool { _, ok := node.Labels[k]; return ok }) {
		return status{} // a node without zone labels: a single-zone cluster
	}
	for _, z := range st.zones {
		v, ok := node.Labels[z.key]
		if !ok {
			v, ok = node.Labels[gaLabel(z.key)]
		}
		if !ok || !z.values.Has(v) {
			return reject(unresolvable, reasonVolumeZone)
		}
	}
	return status{}
}

// volumeBindings are what must happen before the pod is bound: volumes
// to bind to claims (the PV with its claimRef set), and claims to annotate
// with the selected node for a provisioner.
type volumeBindings struct {
	static    []staticBinding
	provision []*v1.PersistentVolumeClaim
	// score is the node's storage-capacity score.
	score int64
}

type staticBinding struct {
	pv  *v1.PersistentVolume
	pvc *v1.PersistentVolumeClaim
}

func (b *volumeBindings) empty() bool { return b == nil || len(b.static)+len(b.provision) == 0 }

// findVolumes is VolumeBinding's Filter: bound claims' volumes must allow
// the node; each unbound claim needs an available matching volume there or
// a class that can provision for the node. It returns the bindings to make
// if the node is chosen, or kube-scheduler's reasons.
func (st *volumeState) findVolumes(node *v1.Node) (*volumeBindings, []string, error) {
	var reasons []string
	nodeOK, pvsFound := true, true
	for _, pvc := range st.bound {
		pv := st.boundPVs[pvc.Spec.VolumeName]
		if pv == nil {
			pvsFound = false
			break
		}
		if volumehelpers.CheckNodeAffinity(pv, node.Labels) != nil {
			nodeOK = false
			break
		}
	}
	if !nodeOK {
		reasons = append(reasons, reasonVolumeNodeAff)
	}
	out := &volumeBindings{}
	unboundOK, storageOK := true, true
	var match, provision []*v1.PersistentVolumeClaim
	for _, pvc := range st.delayed {
		if sel, ok := pvc.Annotations[volumehelpers.AnnSelectedNode]; ok {
			if sel != node.Name {
				unboundOK = false
				match, provision = nil, nil
				break
			}
			provision = append(provision, pvc)
		} else {
			match = append(match, pvc)
		}
	}
	if unboundOK && len(match) > 0 {
		chosen := map[string]*v1.PersistentVolume{}
		for _, pvc := range match {
			class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
			pv, err := volumehelpers.FindMatchingVolume(pvc, st.pvsByClass[class], node, chosen, true, true)
			if err != nil {
				return nil, nil, err
			}
			if pv == nil {
				unboundOK = false
				provision = append(provision, pvc)
				continue
			}
			chosen[pv.Name] = pv
			out.static = append(out.static, staticBinding{pv: pv, pvc: pvc})
		}
	}
	var caps []*storagev1.CSIStorageCapacity
	if len(provision) > 0 {
		ok, enough, found, err := st.canProvision(provision, node)
		if err != nil {
			return nil, nil, err
		}
		unboundOK, storageOK, caps = ok, enough, found
		if ok && enough {
			for _, pvc := range provision {
				if pvc.Annotations[volumehelpers.AnnSelectedNode] != node.Name {
					c := pvc.DeepCopy()
					metav1.SetMetaDataAnnotation(&c.ObjectMeta, volumehelpers.AnnSelectedNode, node.Name)
					out.provision = append(out.provision, c)
				}
			}
		}
	}
	if !unboundOK {
		reasons = append(reasons, reasonBindConflict)
	}
	if !storageOK {
		reasons = append(reasons, reasonNotEnoughStorage)
	}
	if !pvsFound {
		reasons = append(reasons, reasonPVNotExist)
	}
	if len(reasons) > 0 {
		return nil, reasons, nil
	}
	out.score = capacityScore(out.static, provision, caps)
	return out, nil, nil
}

// capacityScore is VolumeBinding's Score with StorageCapacityScoring (beta,
// on in 1.37) and its default shape (utilization 0 % scores 100, 100 %
// scores 0): per storage class, the claims' requests against the volumes
// chosen for them or, when the node needs no existing volume, against the
// capacity of the CSIStorageCapacity that admitted provisioning there; the
// classes' scores averaged. Nodes with more room left score higher.
func capacityScore(static []staticBinding, provision []*v1.PersistentVolumeClaim, caps []*storagev1.CSIStorageCapacity) int64 {
	type use struct{ requested, capacity int64 }
	classes := map[string]*use{}
	get := func(class string) *use {
		u := classes[class]
		if u == nil {
			u = &use{}
			classes[class] = u
		}
		return u
	}
	if len(static) > 0 {
		for _, b := range static {
			u := get(b.pv.Spec.StorageClassName)
			req, capacity := b.pvc.Spec.Resources.Requests[v1.ResourceStorage], b.pv.Spec.Capacity[v1.ResourceStorage]
			u.requested += req.Value()
			u.capacity += capacity.Value()
		}
	} else {
		for i, pvc := range provision {
			if i >= len(caps) || caps[i] == nil {
				continue
			}
			u := get(volumehelpers.GetPersistentVolumeClaimClass(pvc))
			// Every claim of a class draws on the same pool: its capacity
			// is set, not summed.
			u.capacity = 0
			if c := caps[i].Capacity; c != nil {
				u.capacity = c.Value()
			}
			req := pvc.Spec.Resources.Requests[v1.ResourceStorage]
			u.requested += req.Value()
		}
	}
	if len(classes) == 0 {
		return 0
	}
	var sum int64
	for _, u := range classes {
		utilization := int64(100)
		if u.capacity > 0 && u.requested <= u.capacity {
			utilization = u.requested * 100 / u.capacity
		}
		sum += maxNodeScore - utilization
	}
	return int64(math.Round(float64(sum) / float64(len(classes))))
}

// score is the node's VolumeBinding score, computed by its filter.
func (st *volumeState) score(n *nodeInfo) int64 {
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.scores[n.name()]
}

// canProvision: each claim's class has a provisioner whose allowed
// topologies include the node, and, for CSI drivers that publish storage
// capacity, a CSIStorageCapacity the node can reach has room for it.
// It also returns, per claim, the CSIStorageCapacity that has room for it
// (nil when capacity is not tracked), for the score.
func (st *volumeState) canProvision(claims []*v1.PersistentVolumeClaim, node *v1.Node) (ok, enough bool, caps []*storagev1.CSIStorageCapacity, err error) {
	caps = make([]*storagev1.CSIStorageCapacity, len(claims))
	for i, pvc := range claims {
		class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
		if class == "" {
			return false, false, nil, fmt.Errorf("no class for claim %q", claimKey(pvc.Namespace, pvc.Name))
		}
		sc, err := st.env.classes.Get(class)
		if err != nil {
			return false, false, nil, fmt.Errorf("failed to find storage class %q", class)
		}
		if sc.Provisioner == "" || sc.Provisioner == volumehelpers.NotSupportedProvisioner {
			return false, true, nil, nil
		}
		if !matchTopology(sc.AllowedTopologies, node.Labels) {
			return false, true, nil, nil
		}
		found, c := st.hasCapacity(sc, pvc, node)
		if !found {
			return true, false, nil, nil
		}
		caps[i] = c
	}
	return true, true, caps, nil
}

// matchTopology is true when there are no terms or one term's every
// expression has the node's value for its key among its values.
func matchTopology(terms []v1.TopologySelectorTerm, nodeLabels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	for _, t := range terms {
		ok := true
		for _, e := range t.MatchLabelExpressions {
			v, has := nodeLabels[e.Key]
			if !has || !slices.Contains(e.Values, v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// hasCapacity also returns the CSIStorageCapacity found, nil when the
// driver does not track capacity.
func (st *volumeState) hasCapacity(sc *storagev1.StorageClass, pvc *v1.PersistentVolumeClaim, node *v1.Node) (bool, *storagev1.CSIStorageCapacity) {
	want, ok := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok || st.env.drivers == nil || st.env.capacities == nil {
		return true, nil
	}
	d, err := st.env.drivers.Get(sc.Provisioner)
	if err != nil || d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity {
		return true, nil
	}
	caps, err := st.env.capacities.List(labels.Everything())
	if err != nil {
		return false, nil
	}
	for _, c := range caps {
		limit := c.MaximumVolumeSize
		if limit == nil {
			limit = c.Capacity
		}
		if c.StorageClassName != sc.Name || limit == nil || limit.Value() < want.Value() || c.NodeTopology == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.NodeTopology)
		if err == nil && sel.Matches(labels.Set(node.Labels)) {
			return true, c
		}
	}
	return false, nil
}

// reserve decides the bindings for the chosen node (VolumeBinding's
// Reserve): volumes get the claimRef and annotation the PV controller
// expects, and the decisions are assumed for the next cycles.
func (st *volumeState) reserve(node *v1.Node) (*volumeBindings, error) {
	if st == nil || len(st.delayed) == 0 {
		return nil, nil
	}
	b, reasons, err := st.findVolumes(node)
	if err != nil {
		return nil, err
	}
	if len(reasons) > 0 {
		return nil, errors.New(strings.Join(reasons, ", "))
	}
	for i, s := range b.static {
		pv, _, err := volumehelpers.GetBindVolumeToClaim(s.pv, s.pvc)
		if err != nil {
			return nil, err
		}
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Kind == "" {
			// The lister's claim has no TypeMeta for the reference.
			pv.Spec.ClaimRef.Kind, pv.Spec.ClaimRef.APIVersion = "PersistentVolumeClaim", "v1"
		}
		b.static[i].pv = pv
	}
	st.env.assume(b)
	return b, nil
}

// inTreeSource names a volume's in-tree attachable type, which
// kube-scheduler translates to CSI (attach limits, topology) and
// nodeshepherd does not; "" for others.
func inTreeSource(pv *v1.PersistentVolume) string {
	switch src := pv.Spec.PersistentVolumeSource; {
	case src.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case src.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case src.AzureDisk != nil:
		return "azureDisk"
	case src.Cinder != nil:
		return "cinder"
	case src.VsphereVolume != nil:
		return "vsphereVolume"
	case src.PortworxVolume != nil:
		return "portworxVolume"
	}
	return ""
}

// unsupportedVolumes refuses a pod whose claims are bound to volumes of an
// in-tree attachable type (legacy volumes, migrated to CSI drivers).
func (e *volumeEnv) unsupportedVolumes(pod *v1.Pod) string {
	if e == nil {
		return ""
	}
	var found []string
	for i := range pod.Spec.Volumes {
		name, _ := claimName(pod, &pod.Spec.Volumes[i])
		if name == "" {
			continue
		}
		pvc, err := e.pvcs.PersistentVolumeClaims(pod.Namespace).Get(name)
		if err != nil || pvc.Spec.VolumeName == "" {
			continue
		}
		if pv, err := e.pvs.Get(pvc.Spec.VolumeName); err == nil {
			if src := inTreeSource(pv); src != "" {
				found = append(found, fmt.Sprintf("in-tree %s persistentvolume %q (pvc %q)", src, pv.Name, name))
			}
		}
	}
	return refusal(found)
}

// watchStorage builds the volume environment from the storage informers
// and wakes the pods that use claims when storage objects appear or
// change (kube-scheduler's volume plugins' events).
func (s *Scheduler) watchStorage(d Deps) error {
	if d.PersistentVolumeClaims == nil {
		return nil
	}
	if d.PersistentVolumes == nil || d.StorageClasses == nil || d.CSINodes == nil || d.CSIDrivers == nil ||
		d.CSIStorageCapacities == nil || d.VolumeAttachments == nil {
		return errors.New("scheduler: the PersistentVolumeClaims informer needs the PersistentVolumes, StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities and VolumeAttachments informers")
	}
	s.volumes = &volumeEnv{pvcs: d.PersistentVolumeClaims.Lister(), pvs: d.PersistentVolumes.Lister(),
		classes: d.StorageClasses.Lister(), csiNodes: d.CSINodes.Lister(), drivers: d.CSIDrivers.Lister(),
		capacities: d.CSIStorageCapacities.Lister(), attachments: d.VolumeAttachments.Lister(),
		assumedPVs: map[string]*v1.PersistentVolume{}, assumedPVCs: map[string]*v1.PersistentVolumeClaim{}}
	helps := func(p *queuedPod) bool { return usesClaims(p.info.pod) }
	wake := func(event string, onDelete bool) toolscache.ResourceEventHandlerFuncs {
		h := toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.queue.MoveAll(event+"Add", helps) },
			UpdateFunc: func(any, any) { s.queue.MoveAll(event+"Update", helps) },
		}
		if onDelete {
			h = toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { s.queue.MoveAll(event+"Delete", helps) }}
		}
		return h
	}
	for _, w := range []struct {
		inf      toolscache.SharedIndexInformer
		event    string
		onDelete bool
	}{
		{d.PersistentVolumeClaims.Informer(), "PersistentVolumeClaim", false},
		{d.PersistentVolumes.Informer(), "PersistentVolume", false},
		{d.StorageClasses.Informer(), "StorageClass", false},
		{d.CSINodes.Informer(), "CSINode", false},
		{d.CSIDrivers.Informer(), "CSIDriver", false},
		{d.CSIStorageCapacities.Informer(), "CSIStorageCapacity", false},
		{d.VolumeAttachments.Informer(), "VolumeAttachment", true},
	} {
		reg, err := w.inf.AddEventHandler(wake(w.event, w.onDelete))
		if err != nil {
			return err
		}
		s.synced = append(s.synced, reg.HasSynced) // the handler's first list, as for nodes and pods
	}
	return nil
}
