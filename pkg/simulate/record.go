package simulate

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// DisruptionTarget reasons that tell who deleted a pod.
const (
	reasonTaintEviction = "DeletionByTaintManager"
	reasonPreemption    = "PreemptionByScheduler"
	reasonEvictionAPI   = "EvictionByEvictionAPI"
)

// burstLabel marks the pods of burst steps.
const burstLabel = "simulate.nodeshepherd.io/burst"

// recorder follows nodes, pods, workloads and drain events through
// informers and keeps what the report needs: transitions with their times,
// and the current state for the charts' samples.
type recorder struct {
	mu    sync.Mutex
	now   func() time.Time
	t0    time.Time // zero until the timeline starts
	nodes map[string]*nodeRec
	pods  map[types.UID]*podRec

	firstFault                                             time.Time
	firstNotReady, firstTaint, firstEviction, lastEviction time.Time
	evicted, preempted, drained, drains                    int
	tainted, cordoned                                      map[string]bool
	maxCordoned                                            int
	notReadyPods                                           map[types.UID]bool
	maxNotReady, maxAfterRecovery                          time.Duration

	workloads     func() (ready bool)
	expected      []workloadKey // the scenario's workloads, see expectWorkloads
	allReady      bool
	allReadySince time.Time

	// services are the scenario's Services (namespace/name); slices holds
	// the ready endpoint addresses of each EndpointSlice of any Service.
	services     map[string]bool
	slices       map[string]sliceRec
	minEndpoints int
	// A Service's outage: hadEndpoints once it had a ready endpoint,
	// noEndpointsSince while it has none after that (an outage, not a
	// Service still starting); maxNoEndpoints is the longest outage that
	// ended during the timeline.
	hadEndpoints     map[string]bool
	noEndpointsSince map[string]time.Time
	maxNoEndpoints   time.Duration

	// Stateful replicas and their volumes: claims (namespace/name) to their
	// volumes, the fake driver's attachments, and each StatefulSet pod with
	// claims that ran when the timeline started (by namespace/name).
	claims      map[string]string
	attachments map[string]attachRec
	replicas    map[string]*replicaRec

	// Machines: each node's Node UID and boot ID as last seen, to tell a
	// reboot (a new boot ID) from a replacement (a new Node).
	machines           map[string]machineRec
	rebooted, replaced map[string]bool

	// outOfService are the nodes tainted out of service during the
	// timeline; forceDeleted counts the pods removed from the API while
	// their node was not Ready or gone (no kubelet confirmed the deletion).
	outOfService map[string]bool
	forceDeleted int

	// Repairs, recorded when the scenario has remediation policies: each
	// node's repair record as last seen (by name), what the timeline
	// started, and the controller's events (by UID, with the count seen:
	// a repeated event is one object with a higher count).
	repairs                   bool
	records                   map[string]rem.Request
	repairsStarted, stepsDone int
	stepsMoved                int
	maxInRepair, repairsDone  int
	blocked, exhausted        map[string]bool
	eventCounts               map[types.UID]int32
	// Fences: the nodes whose record confirmed a Fence's power-off
	// (fenceBootID written), and those with a FenceVetoed event.
	fenced, vetoed map[string]bool
}

// machineRec is the Node and boot a node name last had.
type machineRec struct {
	uid  types.UID
	boot string
}

// attachRec is a VolumeAttachment: which volume on which node, attached.
type attachRec struct {
	pv, node string
	attached bool
}

// replicaRec is a StatefulSet pod that ran when the timeline started, on
// node, with its claims. Once its node failed, volumeAt is when its volumes
// were first attached to another node and runningAt when a pod of its name
// first ran Ready on another node with its volumes attached there.
type replicaRec struct {
	node                string
	claims              []string
	volumeAt, runningAt time.Time
}

// sliceRec is an EndpointSlice: its Service and ready addresses.
type sliceRec struct {
	service string // namespace/name
	ready   []string
}

type nodeRec struct {
	zone          string
	failed        bool // went NotReady during the timeline
	ready         bool
	readySince    time.Time
	noExecute     bool
	noSchedule    bool // a condition taint other than not-ready
	outOfService  bool // node.kubernetes.io/out-of-service
	unschedulable bool
	inRepair      bool // has a repair record (remediation)
}

type podRec struct {
	name          string // namespace/name
	stateful      bool   // owned by a StatefulSet
	claims        []string
	node          string
	created       time.Time
	scheduled     time.Time
	burst         bool
	ready         bool
	everReady     bool
	notReadySince time.Time
	terminating   bool
	counted       bool // its DisruptionTarget was counted
}

func newRecorder(now func() time.Time) *recorder {
	return &recorder{now: now, nodes: map[string]*nodeRec{}, pods: map[types.UID]*podRec{},
		tainted: map[string]bool{}, cordoned: map[string]bool{}, notReadyPods: map[types.UID]bool{},
		services: map[string]bool{}, slices: map[string]sliceRec{},
		hadEndpoints: map[string]bool{}, noEndpointsSince: map[string]time.Time{},
		claims: map[string]string{}, attachments: map[string]attachRec{}, replicas: map[string]*replicaRec{},
		machines: map[string]machineRec{}, rebooted: map[string]bool{}, replaced: map[string]bool{},
		records: map[string]rem.Request{}, blocked: map[string]bool{}, exhausted: map[string]bool{}, eventCounts: map[types.UID]int32{},
		outOfService: map[string]bool{}, fenced: map[string]bool{}, vetoed: map[string]bool{}}
}

// trackRepairs makes the recorder count remediation repairs (a scenario
// with remediation policies, in both runs). Call it before the informers
// start.
func (r *recorder) trackRepairs() { r.repairs = true }

// watchServices names the scenario's Services, whose endpoints are counted.
func (r *recorder) watchServices(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.services[k] = true
	}
}

// watch registers the handlers on the informers.
func (r *recorder) watch(f informers.SharedInformerFactory) {
	handler := func(on func(obj any, deleted bool)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { on(obj, false) },
			UpdateFunc: func(_, obj any) { on(obj, false) },
			DeleteFunc: func(obj any) { on(kube.Untombstone(obj), true) },
		}
	}
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(handler(func(o any, del bool) {
		if n, ok := o.(*v1.Node); ok {
			r.onNode(n, del)
		}
	}))
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(handler(func(o any, del bool) {
		if p, ok := o.(*v1.Pod); ok {
			r.onPod(p, del)
		}
	}))
	_, _ = f.Core().V1().Events().Informer().AddEventHandler(handler(func(o any, del bool) {
		if e, ok := o.(*v1.Event); ok && !del {
			r.onEvent(e)
		}
	}))
	_, _ = f.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handler(func(o any, del bool) {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			r.onEndpointSlice(es, del)
		}
	}))
	_, _ = f.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(handler(func(o any, del bool) {
		if c, ok := o.(*v1.PersistentVolumeClaim); ok {
			r.onClaim(c, del)
		}
	}))
	_, _ = f.Storage().V1().VolumeAttachments().Informer().AddEventHandler(handler(func(o any, del bool) {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			r.onAttachment(va, del)
		}
	}))
	deps, sts, dss := f.Apps().V1().Deployments(), f.Apps().V1().StatefulSets(), f.Apps().V1().DaemonSets()
	// r.expected is set before the informers start and never changes, so
	// it is read without r.mu (finish calls this with r.mu held).
	r.workloads = func() bool { return workloadsReady(deps.Lister(), sts.Lister(), dss.Lister(), r.expected) }
	for _, inf := range []cache.SharedIndexInformer{deps.Informer(), sts.Informer(), dss.Informer()} {
		_, _ = inf.AddEventHandler(handler(func(any, bool) { r.onWorkload() }))
	}
}

// start marks the beginning of the timeline: counting starts now.
func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t0 = r.now()
	r.minEndpoints = r.readyEndpointsLocked()
	r.endpointOutagesLocked(r.t0)
	inRepair := 0
	for name, n := range r.nodes {
		if n.unschedulable {
			r.cordoned[name] = true
		}
		if n.inRepair {
			inRepair++
		}
	}
	r.maxInRepair = inRepair
	for _, p := range r.pods {
		if p.stateful && len(p.claims) > 0 && p.node != "" && !p.terminating {
			r.replicas[p.name] = &replicaRec{node: p.node, claims: p.claims}
		}
	}
}

func (r *recorder) started() bool { return !r.t0.IsZero() }

// fault marks a timeline step: the first one starts the clocks of the
// time-to measures.
func (r *recorder) fault() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstFault.IsZero() {
		r.firstFault = r.now()
	}
}

func (r *recorder) onNode(n *v1.Node, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if deleted {
		delete(r.nodes, n.Name)
		delete(r.records, n.Name)
		return
	}
	rec := r.nodes[n.Name]
	if rec == nil {
		rec = &nodeRec{zone: n.Labels[v1.LabelTopologyZone]}
		r.nodes[n.Name] = rec
	}
	r.machineLocked(n)
	if r.repairs {
		r.repairLocked(n, rec)
	}
	ready := kube.NodeReady(n)
	if ready && !rec.ready {
		rec.readySince = now
	}
	if !ready && rec.ready && r.started() && r.firstNotReady.IsZero() {
		r.firstNotReady = now
	}
	if !ready && rec.ready && r.started() {
		rec.failed = true
	}
	rec.ready = ready
	rec.noExecute, rec.noSchedule, rec.outOfService = false, false, false
	for _, t := range n.Spec.Taints {
		switch {
		case t.Key == v1.TaintNodeOutOfService:
			rec.outOfService = true
		case t.Effect == v1.TaintEffectNoExecute && (t.Key == v1.TaintNodeNotReady || t.Key == v1.TaintNodeUnreachable):
			rec.noExecute = true
		case t.Effect == v1.TaintEffectNoSchedule && t.Key != v1.TaintNodeNotReady && t.Key != v1.TaintNodeUnreachable && t.Key != v1.TaintNodeUnschedulable:
			rec.noSchedule = true
		}
	}
	if rec.outOfService && r.started() {
		r.outOfService[n.Name] = true
	}
	if rec.noExecute && r.started() {
		if r.firstTaint.IsZero() {
			r.firstTaint = now
		}
		r.tainted[n.Name] = true
	}
	rec.unschedulable = n.Spec.Unschedulable
	if r.started() {
		if rec.unschedulable {
			r.cordoned[n.Name] = true
		}
		c := 0
		for _, x := range r.nodes {
			if x.unschedulable {
				c++
			}
		}
		r.maxCordoned = max(r.maxCordoned, c)
	}
	r.checkReplicasLocked(now)
}

func (r *recorder) onPod(p *v1.Pod, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	rec := r.pods[p.UID]
	if rec == nil {
		if deleted {
			return
		}
		rec = &podRec{created: now, burst: p.Labels[burstLabel] != "", name: p.Namespace + "/" + p.Name, claims: podClaims(p)}
		for _, o := range p.OwnerReferences {
			rec.stateful = rec.stateful || o.Kind == "StatefulSet"
		}
		if !r.started() {
			rec.created = time.Time{} // existed before the timeline
		}
		r.pods[p.UID] = rec
	}
	if p.Spec.NodeName != "" && rec.node == "" {
		rec.node, rec.scheduled = p.Spec.NodeName, now
	}
	if c := kube.PodCondition(p, v1.DisruptionTarget); c != nil && c.Status == v1.ConditionTrue && !rec.counted && r.started() {
		rec.counted = true
		switch c.Reason {
		case reasonTaintEviction:
			r.evicted++
			if r.firstEviction.IsZero() {
				r.firstEviction = now
			}
			r.lastEviction = now
		case reasonPreemption:
			r.preempted++
		case reasonEvictionAPI:
			r.drained++
		}
	}
	rec.terminating = p.DeletionTimestamp != nil
	ready := kube.PodReady(p) && !deleted
	if ready {
		rec.everReady = true
	}
	switch {
	case !ready && rec.ready && !deleted && !rec.terminating && rec.node != "":
		rec.notReadySince = now
		if r.started() {
			r.notReadyPods[p.UID] = true
		}
	case (ready || deleted || rec.terminating) && !rec.notReadySince.IsZero():
		// A pod being deleted is out of service for good: its episode ends.
		r.closeNotReady(rec, now, deleted || rec.terminating)
	}
	rec.ready = ready
	if deleted {
		// Removed from the API: a kubelet confirms a deletion only from a
		// Ready node; from a node NotReady or gone it was force-deleted.
		if n := r.nodes[rec.node]; r.started() && rec.node != "" && (n == nil || !n.ready) {
			r.forceDeleted++
		}
		delete(r.pods, p.UID)
	}
	r.checkReplicasLocked(now)
}

// machineLocked notes a reboot (the same Node with another boot ID) or a
// replacement (a Node of the same name with another UID) during the
// timeline.
func (r *recorder) machineLocked(n *v1.Node) {
	boot := n.Status.NodeInfo.BootID
	m, seen := r.machines[n.Name]
	if seen && r.started() {
		switch {
		case m.uid != n.UID:
			r.replaced[n.Name] = true
		case m.boot != "" && boot != "" && boot != m.boot:
			r.rebooted[n.Name] = true
		}
	}
	if boot != "" || !seen || m.uid != n.UID {
		r.machines[n.Name] = machineRec{uid: n.UID, boot: boot}
	}
}

// repairLocked follows the node's repair record: a record that appears is
// a repair started, each new step in it (policy, step, since) a step
// started; the nodes with one are in repair. An unreadable record counts
// as in repair, as the controller counts it, and starts nothing.
func (r *recorder) repairLocked(n *v1.Node, rec *nodeRec) {
	req, ok, err := rem.RequestOf(n)
	rec.inRepair = ok || err != nil
	prev, had := r.records[n.Name]
	if ok {
		r.records[n.Name] = req
	} else if err == nil {
		delete(r.records, n.Name)
	}
	if !r.started() {
		return
	}
	if ok {
		if req.FenceBootID != "" && (!had || prev.FenceBootID == "") {
			r.fenced[n.Name] = true
		}
		if !had {
			r.repairsStarted++
		}
		// A step started has another policy, action or start time; the
		// same step at another index is the record following its step
		// after an edit of the ladder (VerdictMoved): nothing started.
		switch {
		case !had || prev.Policy != req.Policy || prev.Action != req.Action || !prev.Since.Equal(req.Since):
			r.stepsDone++
		case prev.Step != req.Step:
			r.stepsMoved++
		}
	}
	c := 0
	for _, x := range r.nodes {
		if x.inRepair {
			c++
		}
	}
	r.maxInRepair = max(r.maxInRepair, c)
}

// podClaims are the claims (namespace/name) of a pod's volumes.
func podClaims(p *v1.Pod) []string {
	var out []string
	for _, vol := range p.Spec.Volumes {
		switch {
		case vol.PersistentVolumeClaim != nil:
			out = append(out, p.Namespace+"/"+vol.PersistentVolumeClaim.ClaimName)
		case vol.Ephemeral != nil:
			out = append(out, p.Namespace+"/"+p.Name+"-"+vol.Name)
		}
	}
	return out
}

func (r *recorder) onClaim(c *v1.PersistentVolumeClaim, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := c.Namespace + "/" + c.Name
	if deleted || c.Spec.VolumeName == "" {
		delete(r.claims, key)
	} else {
		r.claims[key] = c.Spec.VolumeName
	}
	r.checkReplicasLocked(r.now())
}

func (r *recorder) onAttachment(va *storagev1.VolumeAttachment, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if deleted || va.Spec.Source.PersistentVolumeName == nil {
		delete(r.attachments, va.Name)
	} else {
		r.attachments[va.Name] = attachRec{pv: *va.Spec.Source.PersistentVolumeName, node: va.Spec.NodeName,
			attached: va.Status.Attached && va.DeletionTimestamp == nil}
	}
	r.checkReplicasLocked(r.now())
}

// volumesAttachedLocked says whether every claim's volume is attached to
// node; with node empty, to some node other than not.
func (r *recorder) volumesAttachedLocked(claims []string, node, not string) bool {
	for _, c := range claims {
		pv := r.claims[c]
		found := false
		for _, a := range r.attachments {
			if a.attached && a.pv == pv && pv != "" && (a.node == node || node == "" && a.node != not) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// checkReplicasLocked notes when the replicas of failed nodes have their
// volumes attached elsewhere, and run elsewhere with them.
func (r *recorder) checkReplicasLocked(now time.Time) {
	if !r.started() {
		return
	}
	for name, rep := range r.replicas {
		if n := r.nodes[rep.node]; n == nil || !n.failed || !rep.runningAt.IsZero() {
			continue
		}
		if rep.volumeAt.IsZero() && r.volumesAttachedLocked(rep.claims, "", rep.node) {
			rep.volumeAt = now
		}
		for _, p := range r.pods {
			if p.name == name && p.ready && !p.terminating && p.node != "" && p.node != rep.node && r.volumesAttachedLocked(rep.claims, p.node, "") {
				rep.runningAt = now
			}
		}
	}
}

// replicasWithVolumesLocked counts the stateful replicas of the timeline's
// start that run Ready with their volumes attached to their node.
func (r *recorder) replicasWithVolumesLocked() int {
	n := 0
	for name, rep := range r.replicas {
		for _, p := range r.pods {
			if p.name == name && p.ready && !p.terminating && p.node != "" && r.volumesAttachedLocked(rep.claims, p.node, "") {
				n++
				break
			}
		}
	}
	return n
}

// closeNotReady ends a NotReady episode and measures it, also after the
// node's recovery when the node is Ready.
func (r *recorder) closeNotReady(rec *podRec, now time.Time, deleted bool) {
	since := rec.notReadySince
	rec.notReadySince = time.Time{}
	if !r.started() {
		return
	}
	since = later(since, r.t0)
	r.maxNotReady = max(r.maxNotReady, now.Sub(since))
	if n := r.nodes[rec.node]; n != nil && n.ready && !deleted {
		r.maxAfterRecovery = max(r.maxAfterRecovery, now.Sub(later(since, n.readySince)))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (r *recorder) onEvent(e *v1.Event) {
	switch e.Reason {
	case drain.EventDrainSucceeded:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.started() && !e.LastTimestamp.Time.Before(r.t0.Truncate(time.Second)) {
			r.drains++
		}
	case remediation.EventDone, remediation.EventBlocked, remediation.EventExhausted, remediation.EventFenceVetoed:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.repairs && e.InvolvedObject.Kind == "Node" {
			r.repairEventLocked(e)
		}
	}
}

// repairEventLocked counts the remediation controller's verdicts on nodes
// during the timeline: each occurrence of RemediationDone, the nodes with
// RemediationBlocked or RemediationExhausted. An event the recorder saw
// before the timeline is counted from the count it had then.
func (r *recorder) repairEventLocked(e *v1.Event) {
	count := max(e.Count, 1)
	seen := r.eventCounts[e.UID]
	r.eventCounts[e.UID] = max(count, seen)
	if !r.started() || e.LastTimestamp.Time.Before(r.t0.Truncate(time.Second)) || count <= seen {
		return
	}
	switch e.Reason {
	case remediation.EventDone:
		r.repairsDone += int(count - seen)
	case remediation.EventBlocked:
		r.blocked[e.InvolvedObject.Name] = true
	case remediation.EventExhausted:
		r.exhausted[e.InvolvedObject.Name] = true
	case remediation.EventFenceVetoed:
		r.vetoed[e.InvolvedObject.Name] = true
	}
}

func (r *recorder) onEndpointSlice(es *discoveryv1.EndpointSlice, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := es.Namespace + "/" + es.Name
	if deleted {
		delete(r.slices, key)
	} else {
		rec := sliceRec{service: es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}
		for _, ep := range es.Endpoints {
			// The API says a nil ready is to be read as true.
			if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 {
				rec.ready = append(rec.ready, endpointID(ep))
			}
		}
		r.slices[key] = rec
	}
	if r.started() {
		r.minEndpoints = min(r.minEndpoints, r.readyEndpointsLocked())
	}
	r.endpointOutagesLocked(r.now())
}

// endpointID names an endpoint by the pod behind it when the slice says
// which (kubemark's fake runtime gives every pod of a hollow node the same
// IP, so addresses alone would count one endpoint), else by its address.
func endpointID(ep discoveryv1.Endpoint) string {
	if r := ep.TargetRef; r != nil && r.Name != "" {
		return r.Kind + "/" + r.Namespace + "/" + r.Name
	}
	return ep.Addresses[0]
}

// endpointOutagesLocked follows each Service's outages: a Service that had
// a ready endpoint and has none now is out since now; one that has one again
// ends its outage, measured from the timeline's start at the earliest
// (outages during the setup are not the scenario's).
func (r *recorder) endpointOutagesLocked(now time.Time) {
	for svc, n := range r.readyEndpointsByServiceLocked() {
		since, out := r.noEndpointsSince[svc]
		switch {
		case n > 0 && out:
			delete(r.noEndpointsSince, svc)
			if r.started() {
				r.maxNoEndpoints = max(r.maxNoEndpoints, now.Sub(later(since, r.t0)))
			}
		case n == 0 && !out && r.hadEndpoints[svc]:
			r.noEndpointsSince[svc] = now
		}
		if n > 0 {
			r.hadEndpoints[svc] = true
		}
	}
}

// readyEndpointsLocked counts the distinct ready endpoints (endpointID) of
// each of the scenario's Services (a pod moving between slices is counted
// once), summed.
func (r *recorder) readyEndpointsLocked() int {
	return sumValues(r.readyEndpointsByServiceLocked())
}

func (r *recorder) readyEndpointsByServiceLocked() map[string]int {
	seen := map[string]map[string]bool{}
	for _, s := range r.slices {
		if !r.services[s.service] {
			continue
		}
		if seen[s.service] == nil {
			seen[s.service] = map[string]bool{}
		}
		for _, a := range s.ready {
			seen[s.service][a] = true
		}
	}
	out := map[string]int{}
	for svc := range r.services {
		out[svc] = len(seen[svc])
	}
	return out
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// readyEndpoints returns the ready endpoints of each of the scenario's
// Services.
func (r *recorder) readyEndpoints() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyEndpointsByServiceLocked()
}

func (r *recorder) onWorkload() {
	if r.workloads == nil {
		return
	}
	ready := r.workloads()
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready && !r.allReady {
		r.allReadySince = r.now()
	}
	r.allReady = ready
}

// workloadKey names a workload the scenario creates: its kind and
// namespace/name.
type workloadKey struct{ kind, key string }

// expectWorkloads names the scenario's workloads: until each is in the
// informers' caches and Ready, the workloads are not ready. Without it an
// informer that has not yet seen a freshly created Deployment would make
// an empty cluster look ready, and the timeline would start early. Call it
// before the informers start.
func (r *recorder) expectWorkloads(keys []workloadKey) { r.expected = keys }

// workloadsReady says whether every expected workload is known, and every
// Deployment, StatefulSet and DaemonSet has observed its spec and has all
// its replicas Ready.
func workloadsReady(deps appslisters.DeploymentLister, sts appslisters.StatefulSetLister, dss appslisters.DaemonSetLister, expected []workloadKey) bool {
	for _, w := range expected {
		ns, name, _ := cache.SplitMetaNamespaceKey(w.key)
		var err error
		switch w.kind {
		case "Deployment":
			_, err = deps.Deployments(ns).Get(name)
		case "StatefulSet":
			_, err = sts.StatefulSets(ns).Get(name)
		case "DaemonSet":
			_, err = dss.DaemonSets(ns).Get(name)
		}
		if err != nil {
			return false
		}
	}
	everything := labels.Everything()
	ds, _ := deps.List(everything)
	for _, d := range ds {
		if d.Status.ReadyReplicas < replicas(d.Spec.Replicas) || d.Status.ObservedGeneration < d.Generation {
			return false
		}
	}
	ss, _ := sts.List(everything)
	for _, s := range ss {
		if s.Status.ReadyReplicas < replicas(s.Spec.Replicas) || s.Status.ObservedGeneration < s.Generation {
			return false
		}
	}
	dd, _ := dss.List(everything)
	for _, d := range dd {
		if d.Status.NumberReady < d.Status.DesiredNumberScheduled || d.Status.DesiredNumberScheduled == 0 || d.Status.ObservedGeneration < d.Generation {
			return false
		}
	}
	return true
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// Sample is the cluster's state at one moment, for the charts.
type Sample struct {
	T            float64        `json:"t"` // cluster seconds since the timeline started
	ZoneReady    map[string]int `json:"zoneReady"`
	ZoneNotReady map[string]int `json:"zoneNotReady"`
	NoExecute    int            `json:"noExecuteTainted"`
	NoSchedule   int            `json:"conditionTainted"`
	Cordoned     int            `json:"cordoned"`
	PodsReady    int            `json:"podsReady"`
	PodsNotReady int            `json:"podsNotReady"`
	PodsPending  int            `json:"podsPending"`
	Evicted      int            `json:"evicted"`
	Preempted    int            `json:"preempted"`
	DrainEvicted int            `json:"drainEvicted"`
	DrainsDone   int            `json:"drains"`
	// ServiceEndpoints is the ready endpoints of the scenario's Services.
	ServiceEndpoints int `json:"serviceReadyEndpoints"`
	// PodsTerminating are pods deleted but not gone (no kubelet confirmed).
	PodsTerminating int `json:"podsTerminating"`
	// Replicas is the StatefulSet pods with volumes that ran when the
	// timeline started; ReplicasWithVolumes of them run Ready now with their
	// volumes attached to their node.
	// OutOfService is the nodes tainted node.kubernetes.io/out-of-service.
	OutOfService        int `json:"outOfServiceTainted,omitempty"`
	Replicas            int `json:"statefulReplicas,omitempty"`
	ReplicasWithVolumes int `json:"statefulReplicasWithVolumes,omitempty"`
	// InRepair is the nodes with a remediation repair record; RepairsDone,
	// Rebooted and Replaced count repairs done and nodes rebooted and
	// replaced so far.
	InRepair    int `json:"nodesInRepair,omitempty"`
	RepairsDone int `json:"repairsDone,omitempty"`
	Rebooted    int `json:"nodesRebooted,omitempty"`
	Replaced    int `json:"nodesReplaced,omitempty"`
}

// sample takes the current state; t is in cluster seconds.
func (r *recorder) sample(t float64) Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Sample{T: t, ZoneReady: map[string]int{}, ZoneNotReady: map[string]int{},
		Evicted: r.evicted, Preempted: r.preempted, DrainEvicted: r.drained, DrainsDone: r.drains,
		ServiceEndpoints: r.readyEndpointsLocked(), Replicas: len(r.replicas), ReplicasWithVolumes: r.replicasWithVolumesLocked(),
		RepairsDone: r.repairsDone, Rebooted: len(r.rebooted), Replaced: len(r.replaced)}
	for _, n := range r.nodes {
		if n.inRepair {
			s.InRepair++
		}
		if n.ready {
			s.ZoneReady[n.zone]++
		} else {
			s.ZoneNotReady[n.zone]++
		}
		if n.noExecute {
			s.NoExecute++
		}
		if n.noSchedule {
			s.NoSchedule++
		}
		if n.outOfService {
			s.OutOfService++
		}
		if n.unschedulable {
			s.Cordoned++
		}
	}
	for _, p := range r.pods {
		switch {
		case p.terminating:
			s.PodsTerminating++
		case p.node == "":
			s.PodsPending++
		case p.ready:
			s.PodsReady++
		default:
			s.PodsNotReady++
		}
	}
	return s
}

// finish closes what is still open at the end of the run and returns the
// measures in real time (the caller scales them); nil is "never".
func (r *recorder) finish(recovery time.Time) map[string]*float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now()
	out := map[string]*float64{}
	dur := func(name string, d time.Duration) { v := d.Seconds(); out[name] = &v }
	count := func(name string, n int) { v := float64(n); out[name] = &v }
	since := func(name string, from, t time.Time) {
		if !t.IsZero() {
			dur(name, t.Sub(from))
		} else {
			out[name] = nil
		}
	}
	first := r.firstFault
	since("timeToDetect", first, r.firstNotReady)
	since("timeToTaint", first, r.firstTaint)
	since("timeToFirstEviction", first, r.firstEviction)
	since("timeToLastEviction", first, r.lastEviction)
	count("podsEvicted", r.evicted)
	count("nodesTainted", len(r.tainted))
	count("preemptions", r.preempted)
	count("podsDrained", r.drained)
	count("drains", r.drains)
	count("nodesCordoned", len(r.cordoned))
	count("maxNodesCordoned", r.maxCordoned)
	count("nodesRebooted", len(r.rebooted))
	count("nodesReplaced", len(r.replaced))
	if r.repairs {
		count("repairsStarted", r.repairsStarted)
		count("repairStepsStarted", r.stepsDone)
		count("maxNodesInRepair", r.maxInRepair)
		count("repairsDone", r.repairsDone)
		count("repairsBlocked", len(r.blocked))
		count("repairsExhausted", len(r.exhausted))
		count("repairStepsMoved", r.stepsMoved)
		count("fencesConfirmed", len(r.fenced))
		count("fencesVetoed", len(r.vetoed))
	}
	count("nodesOutOfService", len(r.outOfService))
	count("podsForceDeleted", r.forceDeleted)
	if len(r.services) > 0 {
		count("serviceReadyEndpointsMin", r.minEndpoints)
		count("serviceReadyEndpointsAtEnd", r.readyEndpointsLocked())
		// An outage still open at the end lasts until the end (a run
		// stopped during the setup has had no timeline, so no outage).
		longest := r.maxNoEndpoints
		for _, since := range r.noEndpointsSince {
			if r.started() {
				longest = max(longest, end.Sub(later(since, r.t0)))
			}
		}
		dur("maxServiceWithoutReadyEndpoints", longest)
	} else {
		for name := range serviceMeasures {
			out[name] = nil
		}
	}

	maxNotReady, afterRecovery := r.maxNotReady, r.maxAfterRecovery
	notReadyAtEnd, pendingAtEnd, replacements := 0, 0, 0
	var maxPending, burstPending time.Duration
	burstSeen := false
	for _, p := range r.pods {
		if !p.notReadySince.IsZero() && !p.terminating {
			notReadyAtEnd++
			since := later(p.notReadySince, r.t0)
			maxNotReady = max(maxNotReady, end.Sub(since))
			if n := r.nodes[p.node]; n != nil && n.ready {
				afterRecovery = max(afterRecovery, end.Sub(later(since, n.readySince)))
			}
		}
		if p.node == "" && !p.terminating {
			pendingAtEnd++
		}
		if p.created.IsZero() {
			continue
		}
		wait := end.Sub(p.created)
		if p.node != "" {
			wait = p.scheduled.Sub(p.created)
		}
		if p.burst {
			burstPending, burstSeen = max(burstPending, wait), true
			continue
		}
		replacements++
		maxPending = max(maxPending, wait)
	}
	terminatingAtEnd := 0
	for _, p := range r.pods {
		if p.terminating {
			terminatingAtEnd++
		}
	}
	count("podsTerminatingAtEnd", terminatingAtEnd)
	// Only runs whose stateful replicas lost their node have these.
	var moved []*replicaRec
	for _, rep := range r.replicas {
		if n := r.nodes[rep.node]; n == nil || n.failed {
			moved = append(moved, rep)
		}
	}
	if len(moved) > 0 {
		var volumeAt, runningAt time.Time
		for _, rep := range moved {
			if volumeAt = later(volumeAt, rep.volumeAt); rep.volumeAt.IsZero() {
				volumeAt = time.Time{}
				break
			}
		}
		for _, rep := range moved {
			if runningAt = later(runningAt, rep.runningAt); rep.runningAt.IsZero() {
				runningAt = time.Time{}
				break
			}
		}
		since("timeToVolumeAttachedElsewhere", first, volumeAt)
		since("timeToReplicaRunningElsewhere", first, runningAt)
		count("statefulReplicasOnFailedNodes", len(moved))
	}
	count("podsNotReady", len(r.notReadyPods))
	dur("maxPodNotReady", maxNotReady)
	dur("podNotReadyAfterRecovery", afterRecovery)
	count("podsNotReadyAtEnd", notReadyAtEnd)
	count("rescheduledPods", replacements)
	dur("maxPendingTime", maxPending)
	count("podsPendingAtEnd", pendingAtEnd)
	if burstSeen {
		dur("burstPendingTime", burstPending)
	} else {
		out["burstPendingTime"] = nil
	}
	if r.workloads != nil {
		ready := r.workloads()
		switch {
		case !ready:
			out["allReplicasReadyAfterRecovery"] = nil
		case r.allReadySince.Before(recovery):
			dur("allReplicasReadyAfterRecovery", 0)
		default:
			dur("allReplicasReadyAfterRecovery", r.allReadySince.Sub(recovery))
		}
	}
	return out
}

// zones returns the zones seen, sorted.
func (r *recorder) zones() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, n := range r.nodes {
		seen[n.zone] = true
	}
	return sortedKeys(seen)
}
