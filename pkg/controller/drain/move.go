package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Move before evict (issue 32, point 1). A drain that a PodDisruptionBudget
// blocks (0 disruptions allowed) on a Deployment's pod makes the
// replacement first: the Deployment is scaled up by its pods on the node
// (at most its maxSurge at a time), those pods get the lowest
// pod-deletion-cost, and once the Deployment has that many more available
// replicas it is scaled back, so that its ReplicaSet deletes the pods with
// the lowest cost: the ones on the node. The healthy count never drops below
// what it was, so the budget is never violated and a Service never lacks a
// ready endpoint: the new pods are Ready before the old ones go.
//
// Why a surge of replicas rather than a rolling restart (`kubectl rollout
// restart`): a restart replaces every pod of the workload, not only those on
// the node, and writes the pod template, which GitOps tools report as drift;
// the surge changes only spec.replicas, for the time a pod takes to start,
// and moves exactly the pods on the node. A HorizontalPodAutoscaler owns
// replicas and would undo the surge within its sync period: such
// Deployments are not moved, and the drain says so and what would unblock
// it (hpaRefusal). Nor are Deployments whose pods share a ReadWriteOnce or
// ReadWriteOncePod claim: the surge pod could not use the volume
// (exclusiveClaim). A GitOps tool that owns
// replicas may revert the surge on its next sync: the move then sees
// replicas changed by someone else, leaves them as they are, and stops (said
// in an event); the drain evicts as usual.

const (
	// AnnotationMoveBeforeEvict, "true" or "false" on a Deployment or a
	// Namespace, turns move-before-evict on or off for it (the Deployment's
	// wins, then the Namespace's, then --drain-move-before-evict).
	AnnotationMoveBeforeEvict = "nodeshepherd.io/move-before-evict"
	// AnnotationMove is on a Deployment while a move runs (JSON, moveRecord):
	// a new leader resumes it, a drain that ends undoes it.
	AnnotationMove = "nodeshepherd.io/move"
	// annotationDeletionCost is the ReplicaSet controller's ranking hint:
	// pods with a lower cost are deleted first on a scale-down.
	annotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	// maxMoveRounds bounds the rounds of one Deployment's move per drain.
	maxMoveRounds = 10
)

var lowestDeletionCost = strconv.Itoa(math.MinInt32)

// moveRecord is AnnotationMove's value.
type moveRecord struct {
	Node     string `json:"node"`
	Replicas int32  `json:"replicas"` // before the surge
	Surge    int32  `json:"surge"`
	// Pods moved in this round, with their deletion cost before ("" none).
	Pods  map[string]string `json:"pods"`
	Since string            `json:"since"`
}

// moveState is a drain's view of one Deployment's move.
type moveState struct {
	// refused says why the Deployment's pods are not moved ("" while they
	// may be); said once.
	refused string
	rounds  int
	next    time.Time
	// movedAt is when the last round scaled back, and lastRound its pods:
	// the ReplicaSet deletes them moments later, so they wait movedGrace
	// before they count as not moved.
	movedAt   time.Time
	lastRound map[string]bool
}

// movedGrace is how long after a round its pods wait for the ReplicaSet.
const movedGrace = 10 * time.Second

// Move results, as nodeshepherd_drain_moves_total counts them.
const (
	moveStarted = "started"
	moveMoved   = "moved"
	moveAborted = "aborted"
	moveFailed  = "failed"
	moveRefused = "refused"
)

// Move is a move in flight, as `explain node` shows it.
type Move struct {
	Deployment string    `json:"deployment"`
	Node       string    `json:"node"`
	Replicas   int32     `json:"replicas"`
	Surge      int32     `json:"surge"`
	Since      time.Time `json:"since"`
}

// MoveOf reads the move in flight recorded on a Deployment (ok false: none).
func MoveOf(d *appsv1.Deployment) (Move, bool) {
	r := readMove(d)
	if r == nil {
		return Move{}, false
	}
	since, _ := parseTime(r.Since)
	return Move{Deployment: d.Namespace + "/" + d.Name, Node: r.Node, Replicas: r.Replicas, Surge: r.Surge, Since: since}, true
}

func readMove(d *appsv1.Deployment) *moveRecord {
	v, ok := d.Annotations[AnnotationMove]
	if !ok {
		return nil
	}
	var r moveRecord
	if json.Unmarshal([]byte(v), &r) != nil || r.Node == "" || r.Surge <= 0 || r.Replicas < 0 {
		return nil
	}
	return &r
}

// ownerDeployment returns the Deployment that owns the pod through its
// ReplicaSet, or why there is none that could surge.
func (c *Controller) ownerDeployment(ctx context.Context, p *v1.Pod) (*appsv1.Deployment, string, error) {
	ctx, cancel := bounded(ctx) // its reads
	defer cancel()
	owner := metav1.GetControllerOf(p)
	switch {
	case owner == nil:
		return nil, "a pod without a controller: nothing would make its replacement", nil
	case owner.Kind == "StatefulSet":
		return nil, "StatefulSet " + p.Namespace + "/" + owner.Name + ": its pods cannot surge (each has its own identity and volumes)", nil
	case owner.Kind != "ReplicaSet":
		return nil, owner.Kind + " " + p.Namespace + "/" + owner.Name + ": only a Deployment's pods are moved", nil
	}
	rs, err := c.client.AppsV1().ReplicaSets(p.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	d := metav1.GetControllerOf(rs)
	if d == nil || d.Kind != "Deployment" {
		return nil, "ReplicaSet " + p.Namespace + "/" + owner.Name + " without a Deployment: only a Deployment's pods are moved", nil
	}
	dep, err := c.client.AppsV1().Deployments(p.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	return dep, "", err
}

// moveEnabled says whether move-before-evict is on for the Deployment, or
// why its setting is refused (bad: a value that is neither true nor false).
func (c *Controller) moveEnabled(ctx context.Context, d *appsv1.Deployment) (on bool, bad string, err error) {
	if v, ok := d.Annotations[AnnotationMoveBeforeEvict]; ok {
		on, bad := optIn("Deployment "+d.Namespace+"/"+d.Name, v)
		return on, bad, nil
	}
	return c.namespaceOptIn(ctx, d.Namespace)
}

// namespaceOptIn is move-before-evict as the Namespace's annotation or, without
// one, the flag sets it.
func (c *Controller) namespaceOptIn(ctx context.Context, namespace string) (on bool, bad string, err error) {
	ctx, cancel := bounded(ctx) // its reads
	defer cancel()
	ns, err := c.client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	if v, ok := ns.Annotations[AnnotationMoveBeforeEvict]; ok {
		on, bad := optIn("Namespace "+namespace, v)
		return on, bad, nil
	}
	return c.cfg.MoveBeforeEvict, "", nil
}

// optIn reads AnnotationMoveBeforeEvict's value on what; anything but
// "true" or "false" is refused, visibly, rather than taken as either.
func optIn(what, v string) (on bool, bad string) {
	switch v {
	case "true":
		return true, ""
	case "false":
		return false, ""
	}
	return false, fmt.Sprintf("%s has %s=%q, which is neither \"true\" nor \"false\"", what, AnnotationMoveBeforeEvict, v)
}

// maxSurge is how many pods the Deployment may run above its replicas
// during a rollout, as the deployment controller resolves it (rounded up);
// 0 with why when it allows none.
func maxSurge(d *appsv1.Deployment) (int32, string) {
	name := "Deployment " + d.Namespace + "/" + d.Name
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0, name + " uses the Recreate strategy, which allows no surge"
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	surge := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		surge = *ru.MaxSurge
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&surge, int(replicas), true)
	if err != nil || n <= 0 {
		return 0, name + " has maxSurge " + surge.String() + ", which allows no surge"
	}
	return int32(n), ""
}

// cannotMove says why the Deployment's pods cannot be moved ("" when they
// can); p is its pod whose eviction a PodDisruptionBudget refused, onNode
// the pods on the node.
func (c *Controller) cannotMove(ctx context.Context, d *appsv1.Deployment, p *v1.Pod, onNode []*v1.Pod) (string, error) {
	ctx, cancel := bounded(ctx) // its reads
	defer cancel()
	name := "Deployment " + d.Namespace + "/" + d.Name
	if d.Spec.Paused {
		return name + " is paused", nil
	}
	if _, why := maxSurge(d); why != "" {
		return why, nil
	}
	hpas, err := c.client.AutoscalingV2().HorizontalPodAutoscalers(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for i := range hpas.Items {
		h := &hpas.Items[i]
		if r := h.Spec.ScaleTargetRef; r.Kind == "Deployment" && r.Name == d.Name {
			pdbs, err := c.client.PolicyV1().PodDisruptionBudgets(d.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return "", err
			}
			return hpaRefusal(d, h, budgetsOf(p, pdbs.Items), podsOf(d, onNode)), nil
		}
	}
	claims := map[string]*v1.PersistentVolumeClaim{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil || claims[v.PersistentVolumeClaim.ClaimName] != nil {
			continue
		}
		pvc, err := c.client.CoreV1().PersistentVolumeClaims(d.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // its pods cannot start anyway; nothing held
		case err != nil:
			return "", err
		}
		claims[pvc.Name] = pvc
	}
	return exclusiveClaim(d, claims), nil
}

// exclusiveClaim says why a surge pod of the Deployment could not start
// while its pod on the node runs: the pod template names a
// PersistentVolumeClaim (one claim shared by every pod, unlike an ephemeral
// volume's, made per pod) whose access modes are ReadWriteOncePod (one pod
// at a time) or ReadWriteOnce (one node at a time, and the node is
// cordoned): the surge pod would wait on the volume until the move's
// timeout. claims are the template's claims by name, as read (one missing
// is left out). "" when no such claim.
func exclusiveClaim(d *appsv1.Deployment, claims map[string]*v1.PersistentVolumeClaim) string {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := claims[v.PersistentVolumeClaim.ClaimName]
		if pvc == nil {
			continue
		}
		var mode v1.PersistentVolumeAccessMode
		for _, m := range pvc.Spec.AccessModes {
			if m == v1.ReadWriteOncePod || (m == v1.ReadWriteOnce && mode == "") {
				mode = m
			}
		}
		if mode != "" {
			return fmt.Sprintf("Deployment %s/%s's pods share PersistentVolumeClaim %s (%s): a surge pod could not use it while the pod here holds it",
				d.Namespace, d.Name, pvc.Name, mode)
		}
	}
	return ""
}

// budgetsOf is the PodDisruptionBudgets that select the pod (policy/v1: an
// empty selector selects every pod of the namespace, none selects none).
func budgetsOf(p *v1.Pod, pdbs []policyv1.PodDisruptionBudget) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for i := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdbs[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, &pdbs[i])
		}
	}
	return out
}

// podsOf counts the Deployment's pods among pods (those its selector
// selects, owned by a ReplicaSet, not terminating).
func podsOf(d *appsv1.Deployment, pods []*v1.Pod) int32 {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return 0
	}
	var n int32
	for _, p := range pods {
		if o := metav1.GetControllerOf(p); o != nil && o.Kind == "ReplicaSet" && p.Namespace == d.Namespace &&
			p.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Labels)) {
			n++
		}
	}
	return n
}

// hpaRefusal says why a Deployment a HorizontalPodAutoscaler scales is not
// moved, and what would unblock the drain: at the autoscaler's minReplicas
// (it cannot scale down, the budget allows no disruption: the drain waits
// for good) raising minReplicas by the pods on the node, when the budgets
// would then allow a disruption, else relaxing the budgets.
func hpaRefusal(d *appsv1.Deployment, h *autoscalingv2.HorizontalPodAutoscaler, pdbs []*policyv1.PodDisruptionBudget, here int32) string {
	msg := fmt.Sprintf("Deployment %s/%s's replicas are owned by HorizontalPodAutoscaler %s, which would undo a surge", d.Namespace, d.Name, h.Name)
	minReplicas := ptr.Deref(h.Spec.MinReplicas, 1)
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	names := make([]string, 0, len(pdbs))
	for _, b := range pdbs {
		names = append(names, b.Name)
	}
	budget := "a PodDisruptionBudget"
	switch len(names) {
	case 0:
	case 1:
		budget = "PodDisruptionBudget " + names[0]
	default:
		budget = "PodDisruptionBudgets " + strings.Join(names, ", ")
	}
	if replicas > minReplicas || here <= 0 {
		return msg + "; to drain, relax " + budget
	}
	msg += fmt.Sprintf(" (replicas %d, the autoscaler's minReplicas, where %s allows no disruption)", replicas, budget)
	raised := replicas + here
	helps := len(pdbs) > 0
	for _, b := range pdbs {
		helps = helps && budgetAllowsAt(b, raised)
	}
	if !helps {
		return msg + fmt.Sprintf("; raising minReplicas would not let %s allow a disruption: to drain, relax it", budget)
	}
	pods := "pods"
	if here == 1 {
		pods = "pod"
	}
	return msg + fmt.Sprintf("; to drain, raise the autoscaler's minReplicas from %d to %d (by its %d %s on this node) until the drain is done, or relax %s",
		minReplicas, raised, here, pods, budget)
}

// budgetAllowsAt says whether the budget allows a disruption with n healthy
// pods of its n expected, as the disruption controller counts (percentages
// rounded up).
func budgetAllowsAt(b *policyv1.PodDisruptionBudget, n int32) bool {
	switch {
	case b.Spec.MaxUnavailable != nil:
		u, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MaxUnavailable, int(n), true)
		return err == nil && u >= 1
	case b.Spec.MinAvailable != nil:
		m, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MinAvailable, int(n), true)
		return err == nil && int(n)-m >= 1
	}
	return false
}

// gitOpsOwner names a GitOps tool that manages the Deployment, from the
// labels and annotations Argo CD and Flux put on what they apply ("" none).
func gitOpsOwner(d *appsv1.Deployment) string {
	switch {
	case d.Labels["argocd.argoproj.io/instance"] != "":
		return "Argo CD application " + d.Labels["argocd.argoproj.io/instance"]
	case d.Annotations["argocd.argoproj.io/tracking-id"] != "":
		return "Argo CD (" + d.Annotations["argocd.argoproj.io/tracking-id"] + ")"
	case d.Labels["kustomize.toolkit.fluxcd.io/name"] != "":
		return "Flux Kustomization " + d.Labels["kustomize.toolkit.fluxcd.io/name"]
	case d.Labels["helm.toolkit.fluxcd.io/name"] != "":
		return "Flux HelmRelease " + d.Labels["helm.toolkit.fluxcd.io/name"]
	case d.Labels["app.kubernetes.io/instance"] != "":
		// Argo CD's default tracking label (which Helm sets too: the
		// warning is worded for both, and only warns).
		return "Argo CD application or Helm release " + d.Labels["app.kubernetes.io/instance"] + " (label app.kubernetes.io/instance, Argo CD's default tracking)"
	}
	return ""
}

// ownedBy says whether the pod belongs to the Deployment (through one of its
// ReplicaSets: the ReplicaSet's name starts with the Deployment's).
func ownedBy(p *v1.Pod, d *appsv1.Deployment, rsOwner map[string]string) bool {
	o := metav1.GetControllerOf(p)
	return o != nil && o.Kind == "ReplicaSet" && rsOwner[p.Namespace+"/"+o.Name] == d.Name
}

// moveStep advances the move of the Deployment of a pod whose eviction a
// PodDisruptionBudget refused. It says whether the pod is being moved: no
// eviction is sent for it meanwhile (why says what it waits for).
func (c *Controller) moveStep(ctx context.Context, node *v1.Node, e *podEviction, moves map[types.UID]*moveState, onNode []*v1.Pod, now time.Time) (moving bool, why string) {
	logger := klog.FromContext(ctx)
	owner := metav1.GetControllerOf(e.pod)
	key := e.pod.UID
	if owner != nil {
		key = owner.UID
	}
	ms := moves[key]
	if ms == nil {
		ms = &moveState{}
		moves[key] = ms
	}
	if ms.refused != "" {
		return false, ""
	}
	if now.Before(ms.next) {
		return e.moving, e.lastErr
	}
	ms.next = now.Add(time.Second)
	d, notDeployment, err := c.ownerDeployment(ctx, e.pod)
	if err != nil {
		logger.V(2).Info("Reading the pod's Deployment for a move; will retry", "pod", klog.KObj(e.pod), "err", err)
		return e.moving, e.lastErr
	}
	if notDeployment != "" {
		// Said only where moves were asked for.
		on, bad, err := c.namespaceOptIn(ctx, e.pod.Namespace)
		switch {
		case err != nil:
			return e.moving, e.lastErr
		case bad != "":
			c.refuseMove(node, ms, bad)
		case on:
			c.refuseMove(node, ms, notDeployment)
		default:
			ms.refused = "off"
		}
		return false, ""
	}
	rec := readMove(d)
	switch {
	case rec != nil && rec.Node != node.Name:
		return true, "waiting: Deployment " + d.Namespace + "/" + d.Name + " is moving pods off node " + rec.Node
	case rec != nil:
		return c.continueMove(ctx, node, d, rec, ms, now)
	case ms.lastRound[e.pod.Name] && now.Before(ms.movedAt.Add(movedGrace)):
		return true, "moved: the ReplicaSet deletes it"
	}
	on, bad, err := c.moveEnabled(ctx, d)
	switch {
	case err != nil:
		return e.moving, e.lastErr
	case bad != "":
		c.refuseMove(node, ms, bad)
		return false, ""
	case !on:
		ms.refused = "off"
		return false, ""
	}
	why, err = c.cannotMove(ctx, d, e.pod, onNode)
	if err != nil {
		return e.moving, e.lastErr
	}
	if why != "" {
		c.refuseMove(node, ms, why)
		return false, ""
	}
	if rolling := deploymentRollingOut(d); rolling != "" {
		return false, "" // its rollout moves it anyway; the budget refuses meanwhile
	}
	if ms.rounds >= maxMoveRounds {
		c.refuseMove(node, ms, fmt.Sprintf("Deployment %s/%s: %d moves in this drain did not take its pods off the node", d.Namespace, d.Name, ms.rounds))
		return false, ""
	}
	return c.startMove(ctx, node, d, ms, onNode, now)
}

func (c *Controller) refuseMove(node *v1.Node, ms *moveState, why string) {
	ms.refused = why
	c.metrics.moves.WithLabelValues(moveRefused).Inc()
	c.eventOnce(node, EventDrainMoveRefused, "refused: "+why, "Not moving before evicting: "+why+"; evicting as usual")
}

// startMove surges the Deployment by its pods on the node (at most maxSurge).
func (c *Controller) startMove(ctx context.Context, node *v1.Node, d *appsv1.Deployment, ms *moveState, onNode []*v1.Pod, now time.Time) (bool, string) {
	rsOwner := map[string]string{}
	var here []*v1.Pod
	for _, p := range onNode {
		o := metav1.GetControllerOf(p)
		// A pod an earlier round marked is not moved twice.
		if o == nil || o.Kind != "ReplicaSet" || p.DeletionTimestamp != nil || c.cfg.skipReason(p) != "" || p.Annotations[annotationDeletionCost] == lowestDeletionCost {
			continue
		}
		if _, ok := rsOwner[p.Namespace+"/"+o.Name]; !ok {
			rctx, cancel := bounded(ctx)
			rs, err := c.client.AppsV1().ReplicaSets(p.Namespace).Get(rctx, o.Name, metav1.GetOptions{})
			cancel()
			if err != nil {
				continue
			}
			if do := metav1.GetControllerOf(rs); do != nil && do.Kind == "Deployment" {
				rsOwner[p.Namespace+"/"+o.Name] = do.Name
			}
		}
		if p.Namespace == d.Namespace && ownedBy(p, d, rsOwner) {
			here = append(here, p)
		}
	}
	if len(here) == 0 {
		return false, ""
	}
	surge, _ := maxSurge(d)
	if int(surge) > len(here) {
		surge = int32(len(here))
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	rec := moveRecord{Node: node.Name, Replicas: replicas, Surge: surge, Pods: map[string]string{}, Since: formatTime(now)}
	for _, p := range here[:surge] {
		rec.Pods[p.Name] = p.Annotations[annotationDeletionCost]
	}
	if c.dryRun.Enabled() {
		// Said once; the dry run then evicts as usual (server-side dry runs),
		// as nothing it reported was written.
		c.dryRun.Report(ctx, d, "move", fmt.Sprintf("surge Deployment %s/%s from %d to %d replicas to move %d pods off node %s first",
			d.Namespace, d.Name, replicas, replicas+surge, surge, node.Name))
		ms.refused = "dry run"
		return false, ""
	}
	// The pods first: were the surge written and these not, the scale-down
	// could take a new pod.
	if err := c.markToMove(ctx, d.Namespace, rec.Pods); err != nil {
		klog.FromContext(ctx).V(2).Info("Marking the pods to move; undone, will retry", "deployment", klog.KObj(d), "err", err)
		return false, ""
	}
	if err := c.patchDeployment(ctx, d, replicas+surge, &rec); err != nil {
		klog.FromContext(ctx).V(2).Info("Surging a Deployment to move its pods; will retry", "deployment", klog.KObj(d), "err", err)
		c.restoreCosts(ctx, d.Namespace, rec.Pods)
		return false, ""
	}
	ms.rounds++
	c.metrics.moves.WithLabelValues(moveStarted).Inc()
	pods, them := fmt.Sprintf("%d pods", surge), "the new pods are"
	if surge == 1 {
		pods, them = "1 pod", "the new pod is"
	}
	msg := fmt.Sprintf("Moving %s of Deployment %s/%s off the node before evicting (a PodDisruptionBudget allows no disruption): replicas %d -> %d until %s available, then back to %d, and the ReplicaSet deletes the pods here first (pod-deletion-cost)",
		pods, d.Namespace, d.Name, replicas, replicas+surge, them, replicas)
	if g := gitOpsOwner(d); g != "" {
		msg += "; managed by " + g + ", which may revert replicas meanwhile: then the move stops"
	}
	c.eventOnce(node, EventDrainMoving, fmt.Sprintf("%s/%s round %d", d.Namespace, d.Name, ms.rounds), msg)
	klog.FromContext(ctx).Info("Moving pods before evicting", "node", node.Name, "deployment", klog.KObj(d), "replicas", replicas, "surge", surge)
	return true, "moving: Deployment surged by " + strconv.Itoa(int(surge))
}

// continueMove scales back once the surge is available, or stops the move
// when someone changed replicas or the new pods did not come.
func (c *Controller) continueMove(ctx context.Context, node *v1.Node, d *appsv1.Deployment, rec *moveRecord, ms *moveState, now time.Time) (bool, string) {
	name := d.Namespace + "/" + d.Name
	want := rec.Replicas + rec.Surge
	if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
		got := "unset"
		if d.Spec.Replicas != nil {
			got = strconv.Itoa(int(*d.Spec.Replicas))
		}
		// Someone else owns replicas now (an autoscaler, a GitOps sync, a
		// person): theirs stands; the move ends without touching them.
		if err := c.patchDeployment(ctx, d, -1, nil); err != nil {
			return true, "moving"
		}
		c.restoreCosts(ctx, d.Namespace, rec.Pods)
		c.metrics.moves.WithLabelValues(moveAborted).Inc()
		ms.refused = "replicas changed"
		c.eventOnce(node, EventDrainMoveRefused, "aborted: "+name, fmt.Sprintf(
			"Stopped moving pods of Deployment %s: its replicas were changed from %d to %s by someone else (a HorizontalPodAutoscaler or a GitOps tool?); left as they are, evicting as usual", name, want, got))
		return false, ""
	}
	since, _ := parseTime(rec.Since)
	available := d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas >= want && d.Status.UpdatedReplicas >= want
	if available {
		if err := c.patchDeployment(ctx, d, rec.Replicas, nil); err != nil {
			return true, "moving"
		}
		c.metrics.moves.WithLabelValues(moveMoved).Inc()
		ms.movedAt, ms.lastRound = now, map[string]bool{}
		for p := range rec.Pods {
			ms.lastRound[p] = true
		}
		c.eventOnce(node, EventDrainMoved, fmt.Sprintf("%s round %d", name, ms.rounds), fmt.Sprintf(
			"Moved %d pods of Deployment %s: %d replicas available, scaled back to %d; the ReplicaSet deletes the pods on this node (after %s)",
			rec.Surge, name, d.Status.AvailableReplicas, rec.Replicas, c.clock.Since(since).Round(time.Second)))
		return true, "moved: the ReplicaSet deletes it"
	}
	if timeout := c.moveTimeout(); !since.IsZero() && !now.Before(since.Add(timeout)) {
		if err := c.patchDeployment(ctx, d, rec.Replicas, nil); err != nil {
			return true, "moving"
		}
		c.restoreCosts(ctx, d.Namespace, rec.Pods)
		c.metrics.moves.WithLabelValues(moveFailed).Inc()
		ms.refused = "timed out"
		c.eventOnce(node, EventDrainMoveRefused, "failed: "+name, fmt.Sprintf(
			"Stopped moving pods of Deployment %s: the new pods were not available after %s (%d of %d available); scaled back to %d, evicting as usual",
			name, timeout, d.Status.AvailableReplicas, want, rec.Replicas))
		return false, ""
	}
	return true, fmt.Sprintf("moving: waiting for %d available replicas of Deployment %s (%d now)", want, name, d.Status.AvailableReplicas)
}

// moveTimeout is how long the surged pods have to become available.
func (c *Controller) moveTimeout() time.Duration { return max(c.cfg.DrainTimeout/2, time.Minute) }

// patchDeployment sets replicas (unless negative) and the move record (nil
// removes it), with the Deployment's resourceVersion as a precondition so
// that a concurrent change of replicas is never overwritten.
func (c *Controller) patchDeployment(ctx context.Context, d *appsv1.Deployment, replicas int32, rec *moveRecord) error {
	meta := map[string]any{"resourceVersion": d.ResourceVersion}
	if rec != nil {
		b, _ := json.Marshal(rec)
		meta["annotations"] = map[string]any{AnnotationMove: string(b)}
	} else {
		meta["annotations"] = map[string]any{AnnotationMove: nil}
	}
	patch := map[string]any{"metadata": meta}
	if replicas >= 0 {
		patch["spec"] = map[string]any{"replicas": replicas}
	}
	b, _ := json.Marshal(patch)
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, d, "move", "patch Deployment "+d.Namespace+"/"+d.Name+": "+string(b))
		return nil
	}
	wctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.client.AppsV1().Deployments(d.Namespace).Patch(wctx, d.Name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// setDeletionCost writes the pod's deletion cost.
func (c *Controller) setDeletionCost(ctx context.Context, ns, pod, cost string) error {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotationDeletionCost: cost}}})
	if c.dryRun.Enabled() {
		return nil
	}
	wctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.client.CoreV1().Pods(ns).Patch(wctx, pod, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// markToMove gives the pods (name: cost before) the lowest deletion cost.
// When a write fails, the pods it wrote, and the one whose write failed (it
// may have landed), get their cost back before it returns the error: a pod
// must not keep the lowest cost without a move record, as a later round
// skips such pods, and the ReplicaSet would take it first on any
// scale-down.
func (c *Controller) markToMove(ctx context.Context, ns string, pods map[string]string) error {
	names := make([]string, 0, len(pods))
	for name := range pods {
		names = append(names, name)
	}
	sort.Strings(names)
	tried := map[string]string{}
	for _, name := range names {
		tried[name] = pods[name]
		if err := c.setDeletionCost(ctx, ns, name, lowestDeletionCost); err != nil {
			c.restoreCosts(ctx, ns, tried)
			return fmt.Errorf("marking pod %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

// deletionCostPath is the annotation's JSON pointer.
var deletionCostPath = "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(annotationDeletionCost, "~", "~0"), "/", "~1")

// restoreCosts puts back the deletion costs the pods had before the move
// (name: cost before; "" none), each only while it still has the cost the
// move wrote: a JSON patch whose test operation makes the API server refuse
// it when the cost was changed since (theirs stands) or the annotation is
// gone.
func (c *Controller) restoreCosts(ctx context.Context, ns string, pods map[string]string) {
	if c.dryRun.Enabled() {
		return
	}
	for name, before := range pods {
		ops := []map[string]any{{"op": "test", "path": deletionCostPath, "value": lowestDeletionCost}}
		if before == "" {
			ops = append(ops, map[string]any{"op": "remove", "path": deletionCostPath})
		} else {
			ops = append(ops, map[string]any{"op": "replace", "path": deletionCostPath, "value": before})
		}
		b, _ := json.Marshal(ops)
		wctx, cancel := bounded(ctx)
		_, err := c.client.CoreV1().Pods(ns).Patch(wctx, name, types.JSONPatchType, b, metav1.PatchOptions{})
		cancel()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Restoring a pod's deletion cost (not restored: gone, changed since, or the write failed)", "pod", klog.KRef(ns, name), "err", err)
		}
	}
}

// undoMoves ends the moves a drain that stops (failed, or stopped by a
// decision) still has in flight: replicas back as they were, costs restored.
// A drain stopped because the controller stops leaves them for the next
// leader, which resumes them.
func (c *Controller) undoMoves(ctx context.Context, node string, pods []*v1.Pod) {
	seen := map[string]bool{}
	for _, p := range pods {
		d, notDeployment, err := c.ownerDeployment(ctx, p)
		if err != nil || notDeployment != "" || seen[d.Namespace+"/"+d.Name] {
			continue
		}
		seen[d.Namespace+"/"+d.Name] = true
		rec := readMove(d)
		if rec == nil || rec.Node != node {
			continue
		}
		c.undoMove(ctx, d, rec, "its drain ended")
	}
}

// undoMove scales the Deployment back to the replicas before the move,
// unless someone else changed them since (theirs stands), removes the
// record and restores the pods' deletion costs. The patch is bound to the
// resourceVersion it read, and the Deployment controller writes status right
// after any change, so a conflict is read again and retried at once: the
// same move (same node and start) is undone; one undone or replaced
// meanwhile is left alone. It reports whether the move is over.
func (c *Controller) undoMove(ctx context.Context, d *appsv1.Deployment, rec *moveRecord, why string) bool {
	var replicas int32
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if cur := readMove(d); cur == nil || cur.Node != rec.Node || cur.Since != rec.Since {
			replicas = -2 // not ours to undo any more
			return nil
		}
		replicas = rec.Replicas
		if d.Spec.Replicas == nil || *d.Spec.Replicas != rec.Replicas+rec.Surge {
			replicas = -1
		}
		err := c.patchDeployment(ctx, d, replicas, nil)
		if apierrors.IsConflict(err) {
			rctx, cancel := bounded(ctx)
			fresh, gerr := c.client.AppsV1().Deployments(d.Namespace).Get(rctx, d.Name, metav1.GetOptions{})
			cancel()
			if apierrors.IsNotFound(gerr) {
				replicas = -2
				return nil
			}
			if gerr != nil {
				return gerr
			}
			d = fresh
		}
		return err
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Undoing a move; will retry", "deployment", klog.KObj(d), "why", why)
		return false
	}
	if replicas == -2 {
		return true
	}
	c.restoreCosts(ctx, d.Namespace, rec.Pods)
	c.metrics.moves.WithLabelValues(moveAborted).Inc()
	klog.FromContext(ctx).Info("Undid a move", "why", why, "node", rec.Node, "deployment", klog.KObj(d), "replicas", rec.Replicas, "replicasKept", replicas < 0)
	return true
}

// sweepMoves ends the moves whose drain no longer runs: a move is recorded
// on its Deployment for the drain of its node, and a drain that ended
// without undoing it (its process stopped, and the node was then released
// or deleted before a new leader resumed the drain) would leave the surge
// for good. A move whose node's drain is in flight (DrainScheduled=True on
// a node the controller owns) is left to that drain, which resumes it;
// node "" sweeps every node, else only that one.
// It reports whether every such move is over.
func (c *Controller) sweepMoves(ctx context.Context, node string) bool {
	rctx, cancel := bounded(ctx)
	l, err := c.client.AppsV1().Deployments("").List(rctx, metav1.ListOptions{})
	cancel()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Deployments for moves left behind")
		return false
	}
	done := true
	for i := range l.Items {
		d := &l.Items[i]
		rec := readMove(d)
		if rec == nil || (node != "" && rec.Node != node) {
			continue
		}
		if n, err := c.nodes.Get(rec.Node); err == nil {
			if st := readState(c.view(n)); st.owned && st.phase == phaseInFlight {
				continue
			}
		}
		done = c.undoMove(ctx, d, rec, "its drain no longer runs") && done
	}
	return done
}
