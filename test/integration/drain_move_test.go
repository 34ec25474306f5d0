package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// availability watches, from informers of its own, each Service's ready
// endpoints and each PodDisruptionBudget's health: how long a Service had
// no ready endpoint once it had one, and the fewest healthy pods a budget
// counted once its status was current. (Its desiredHealthy is no measure
// during a move: it follows the surged replicas.)
type availability struct {
	mu        sync.Mutex
	ready     map[string]map[string]int // service -> slice -> ready endpoints
	zeroSince map[string]time.Time
	down      map[string]time.Duration
	healthy   map[string]int32
}

func watchAvailability(t *testing.T, client kubernetes.Interface) *availability {
	t.Helper()
	a := &availability{ready: map[string]map[string]int{}, zeroSince: map[string]time.Time{}, down: map[string]time.Duration{}, healthy: map[string]int32{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	slice := func(obj any) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		n := 0
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				n++
			}
		}
		a.set(s.Labels[discoveryv1.LabelServiceName], s.Name, n)
	}
	_, _ = f.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: slice, UpdateFunc: func(_, obj any) { slice(obj) },
		DeleteFunc: func(obj any) {
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				a.set(s.Labels[discoveryv1.LabelServiceName], s.Name, 0)
			}
		}})
	pdb := func(obj any) {
		b, ok := obj.(*policyv1.PodDisruptionBudget)
		if !ok || b.Status.ObservedGeneration != b.Generation || b.Status.ExpectedPods == 0 {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if old, ok := a.healthy[b.Name]; !ok || b.Status.CurrentHealthy < old {
			a.healthy[b.Name] = b.Status.CurrentHealthy
		}
	}
	_, _ = f.Policy().V1().PodDisruptionBudgets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: pdb, UpdateFunc: func(_, obj any) { pdb(obj) }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return a
}

func (a *availability) set(svc, slice string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready[svc] == nil {
		a.ready[svc] = map[string]int{}
	}
	before := a.total(svc)
	a.ready[svc][slice] = n
	after := a.total(svc)
	now := time.Now()
	switch {
	case before > 0 && after == 0:
		a.zeroSince[svc] = now
	case before == 0 && after > 0 && !a.zeroSince[svc].IsZero():
		a.down[svc] += now.Sub(a.zeroSince[svc])
		a.zeroSince[svc] = time.Time{}
	}
}

func (a *availability) total(svc string) int {
	n := 0
	for _, r := range a.ready[svc] {
		n += r
	}
	return n
}

// readyEndpoints is the Service's ready endpoints now.
func (a *availability) readyEndpoints(svc string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total(svc)
}

// downtime is how long the Service had no ready endpoint (until now).
func (a *availability) downtime(svc string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := a.down[svc]
	if z := a.zeroSince[svc]; !z.IsZero() {
		d += time.Since(z)
	}
	return d
}

func (a *availability) leastHealthy(pdb string) (int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.healthy[pdb]
	return m, ok
}

func createService(t *testing.T, client kubernetes.Interface, app string) {
	t.Helper()
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := client.CoreV1().Services("default").Create(framework.Context(t), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDrainMovesBeforeEvicting (issue 32, point 1): with
// --drain-move-before-evict, a drain blocked by PodDisruptionBudgets that
// allow no disruption (a 1-replica Deployment with minAvailable 1, a
// 3-replica one with maxUnavailable 0) makes the replacements first, through
// the real Deployment and ReplicaSet controllers: each Deployment is scaled
// up by one (its maxSurge, 25%, rounded up), scaled back once the new pod is
// available, and its ReplicaSet deletes the pod on the node. Measured from
// the EndpointSlices: 0 s without a ready endpoint for either Service; no
// budget ever counted fewer healthy pods than it required before the drain
// (1 and 3); no eviction needed; replicas as they were and no move record
// left. As deploy/'s ServiceAccount.
func TestDrainMovesBeforeEvicting(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	sick := names[0]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.MoveBeforeEvict, d.DrainTimeout = true, 3*time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	avail := watchAvailability(t, client)
	apps := map[string]int32{"solo": 1, "trio": 3}
	for app, replicas := range apps {
		pinDeployment(t, client, names[1:], deployment(app, replicas))
		createService(t, client, app)
	}
	createPDB(t, client, "solo", ptr.To(intstr.FromInt32(1)), nil)
	createPDB(t, client, "trio", nil, ptr.To(intstr.FromInt32(0)))
	framework.Eventually(t, 60*time.Second, "every pod a ready endpoint", func(ctx context.Context) (bool, string, error) {
		for app, replicas := range apps {
			if got := avail.readyEndpoints(app); got != int(replicas) {
				return false, app + " not all ready endpoints", nil
			}
		}
		return true, "", nil
	})
	required := map[string]int32{}
	for app := range apps {
		framework.Eventually(t, 30*time.Second, "PodDisruptionBudget "+app+" counts every pod", func(ctx context.Context) (bool, string, error) {
			b, err := client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, app, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			required[app] = b.Status.DesiredHealthy
			return b.Status.CurrentHealthy == apps[app] && b.Status.DisruptionsAllowed == 0, fmt.Sprintf("%+v", b.Status), nil
		})
	}
	before := map[string][]v1.Pod{}
	for app, replicas := range apps {
		before[app], _ = podsOn(framework.Context(t), client, sick, app)
		if len(before[app]) != int(replicas) {
			t.Fatalf("%d %s pods on %s, want %d", len(before[app]), app, sick, replicas)
		}
	}

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	start := time.Now()
	framework.Eventually(t, 3*time.Minute, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	t.Logf("drained in %v", time.Since(start).Round(time.Second))

	for app, replicas := range apps {
		down := avail.downtime(app)
		t.Logf("Service %s: %v without a ready endpoint during the drain", app, down)
		if down != 0 {
			t.Errorf("Service %s had no ready endpoint for %v", app, down)
		}
		if h, ok := avail.leastHealthy(app); !ok || h < required[app] {
			t.Errorf("PodDisruptionBudget %s counted %d healthy pods at the least (seen: %v), below the %d it required", app, h, ok, required[app])
		}
		d, err := client.AppsV1().Deployments("default").Get(framework.Context(t), app, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != replicas || d.Annotations[drain.AnnotationMove] != "" {
			t.Errorf("Deployment %s after the drain: replicas %d (want %d), move record %q", app, *d.Spec.Replicas, replicas, d.Annotations[drain.AnnotationMove])
		}
		if left, _ := podsOn(framework.Context(t), client, sick, app); len(left) != 0 {
			t.Errorf("%d %s pods still on %s", len(left), app, sick)
		}
	}
	if got := ns.Metric(t, "nodeshepherd_drain_moves_total", map[string]string{"result": "moved"}); got != 4 {
		t.Errorf("moves_total{result=moved} = %v, want 4 (solo once, trio three times, one pod each: maxSurge 25%%)", got)
	}
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); got != 0 {
		t.Errorf("%v evictions accepted; every pod should have been moved", got)
	}
	if got, msgs := eventCount(t, client, sick, drain.EventDrainMoving, 4); got != 4 {
		t.Errorf("%d DrainMoving events, want 4: %q", got, msgs)
	}
}

// TestDrainUndoesMovesLeftBehind (issue 32, point 1): a move whose drain no
// longer runs (its process stopped mid-move, and the node was released
// before a new leader resumed the drain) is undone when nodeshepherd starts:
// replicas back to what they were, unless someone else changed them since
// (theirs stands); the record goes either way.
func TestDrainUndoesMovesLeftBehind(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	record := `{"node":"` + names[0] + `","replicas":1,"surge":1,"pods":{},"since":"2026-11-27T10:00:00.000000000Z"}`
	for name, replicas := range map[string]int32{"surged": 2, "rescaled": 3} {
		d := deployment(name, replicas)
		d.Annotations = map[string]string{drain.AnnotationMove: record}
		createDeployment(t, client, d)
	}
	framework.StartNodeShepherd(t, cfg, drainConfig(nil), nil)
	for name, want := range map[string]int32{"surged": 1, "rescaled": 3} {
		framework.Eventually(t, 60*time.Second, "move on "+name+" undone", func(ctx context.Context) (bool, string, error) {
			d, err := client.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			_, left := d.Annotations[drain.AnnotationMove]
			return !left && *d.Spec.Replicas == want, fmt.Sprintf("replicas %d, record left: %v", *d.Spec.Replicas, left), nil
		})
	}
}

// TestDrainMoveOneNodeAtATime (issue 46, point 6): what a move can leave
// behind is bounded. Two nodes, each with one pod of the same Deployment
// (maxSurge 25% of 2: 1), drained at once under a budget that allows no
// disruption: one move per Deployment at a time (its record names the node;
// the other drain waits, and two writers of the record are kept apart by
// its resourceVersion precondition), so replicas never exceed 2 + 1, the
// most a process that stops mid-move, with no leader after it, can leave.
// Measured by a watch of the Deployment from before the drains. With the
// rule reverted (a move started whatever the record's node), replicas reach
// 4.
func TestDrainMoveOneNodeAtATime(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	names := m.NodeNames()
	sick := names[:2]

	// The watch starts before the controller, so no surge goes unseen.
	var mu sync.Mutex
	most := int32(2)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	seen := func(obj any) {
		if dep, ok := obj.(*appsv1.Deployment); ok && dep.Name == "wide" && dep.Spec.Replicas != nil {
			mu.Lock()
			most = max(most, *dep.Spec.Replicas)
			mu.Unlock()
		}
	}
	_, _ = f.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())

	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.MoveBeforeEvict, d.DrainTimeout = true, 3*time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	d := deployment("wide", 2)
	d.Spec.Template.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
		TopologyKey: v1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "wide"}}}}}}
	pinDeployment(t, client, names[2:], d)
	for _, n := range sick {
		if on, _ := podsOn(framework.Context(t), client, n, "wide"); len(on) != 1 {
			t.Fatalf("%d pods of wide on %s, want 1", len(on), n)
		}
	}
	createPDB(t, client, "wide", nil, ptr.To(intstr.FromInt32(0)))

	// The surges wait Pending on the cordoned spare nodes until both drains
	// have tried to evict (the budget refused both) and then looked again at
	// least a few times (a drain looks every 0.5 s; four renewals of a fast
	// Lease take 2 s or more): without one move at a time, the second drain
	// would surge again by then. A slow machine gives it fewer looks, which
	// can weaken this test, never fail it.
	for _, n := range names[2:] {
		framework.SetUnschedulable(t, client, n, true)
	}
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick...)
	framework.Eventually(t, 2*time.Minute, "both pods' evictions refused", func(context.Context) (bool, string, error) {
		n := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "blocked-by-pdb"})
		return n >= 2, fmt.Sprintf("%v refused", n), nil
	})
	waitRenewals(t, client, names[2], 4)
	for _, n := range names[2:] {
		framework.SetUnschedulable(t, client, n, false)
	}
	peak := func() int32 {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
	for _, n := range sick {
		done := drainCondition(client, n, v1.ConditionFalse, "| Completed: ")
		framework.Eventually(t, 3*time.Minute, "drain of "+n+" completed", func(ctx context.Context) (bool, string, error) {
			if p := peak(); p > 3 {
				return false, "", fmt.Errorf("wide was surged to %d replicas, more than its 2 and one move's maxSurge of 1", p)
			}
			return done(ctx)
		})
	}
	t.Logf("replicas of wide at most %d during the two drains", peak())
	if p := peak(); p > 3 {
		t.Errorf("wide was surged to %d replicas, more than its 2 and one move's maxSurge of 1", p)
	}
	got, err := client.AppsV1().Deployments("default").Get(framework.Context(t), "wide", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 2 || got.Annotations[drain.AnnotationMove] != "" {
		t.Errorf("wide after the drains: replicas %d (want 2), move record %q", *got.Spec.Replicas, got.Annotations[drain.AnnotationMove])
	}
	if n := ns.Metric(t, "nodeshepherd_drain_moves_total", map[string]string{"result": "moved"}); n != 2 {
		t.Errorf("moves_total{result=moved} = %v, want 2 (one pod off each node)", n)
	}
}

// TestDrainMoveNextToHPAAndGitOps (issue 32, point 1): move-before-evict
// never fights whoever owns a Deployment's replicas. A Deployment that a
// HorizontalPodAutoscaler scales is not moved, and the event names the
// autoscaler; a Deployment an Argo CD application manages (its default
// tracking label app.kubernetes.io/instance) is moved, the
// event says the tool may revert replicas, and when it does (the test syncs
// replicas back mid-move) the move stops, says so, and leaves replicas as
// the tool set them. The surge's new pod is kept Pending (the other node is
// cordoned) so that the sync lands mid-move. Against the real Deployment,
// ReplicaSet and HPA controllers.
func TestDrainMoveNextToHPAAndGitOps(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick, other := names[0], names[1]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.MoveBeforeEvict, d.DrainTimeout = true, 5*time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)
	scaled, gitops := deployment("scaled", 1), deployment("gitops", 1)
	// Argo CD's default tracking label (issue 46 point 6); the other
	// GitOps labels are unit-tested (TestGitOpsOwner).
	gitops.Labels = map[string]string{"app.kubernetes.io/instance": "shop"}
	pinDeployment(t, client, []string{other}, scaled)
	pinDeployment(t, client, []string{other}, gitops)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: "default"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "scaled"},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: v1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(int32(80))}}}}}}
	if _, err := client.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPDB(t, client, "scaled", ptr.To(intstr.FromInt32(1)), nil)
	createPDB(t, client, "gitops", ptr.To(intstr.FromInt32(1)), nil)
	framework.SetUnschedulable(t, client, other, true)

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, time.Minute, "gitops surged", func(ctx context.Context) (bool, string, error) {
		d, err := client.AppsV1().Deployments("default").Get(ctx, "gitops", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return *d.Spec.Replicas == 2 && d.Annotations[drain.AnnotationMove] != "", fmt.Sprintf("replicas %d", *d.Spec.Replicas), nil
	})
	_, moving := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainMoving), 1)
	if len(moving) != 1 || !strings.Contains(moving[0], "Deployment default/gitops") || !strings.Contains(moving[0], "managed by Argo CD application or Helm release shop (label app.kubernetes.io/instance") {
		t.Errorf("DrainMoving %q: want the gitops move, naming Argo CD", moving)
	}
	// The GitOps tool syncs replicas back to what Git says.
	if _, err := client.AppsV1().Deployments("default").Patch(ctx, "gitops", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, refused := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainMoveRefused), 2)
	var hpaSaid, stopSaid bool
	for _, msg := range refused {
		hpaSaid = hpaSaid || strings.Contains(msg, "Deployment default/scaled's replicas are owned by HorizontalPodAutoscaler scaled")
		stopSaid = stopSaid || strings.Contains(msg, "Stopped moving pods of Deployment default/gitops: its replicas were changed from 2 to 1 by someone else")
	}
	// The autoscaler is at its minimum (1), where the budget (minAvailable
	// 1) allows no disruption: the refusal says what unblocks the drain.
	const hpaFix = "(replicas 1, the autoscaler's minReplicas, where PodDisruptionBudget scaled allows no disruption); to drain, raise the autoscaler's minReplicas from 1 to 2 (by its 1 pod on this node) until the drain is done, or relax PodDisruptionBudget scaled"
	for _, msg := range refused {
		if strings.Contains(msg, "HorizontalPodAutoscaler scaled") && !strings.Contains(msg, hpaFix) {
			t.Errorf("DrainMoveRefused %q does not say what to do: want %q", msg, hpaFix)
		}
	}
	if !hpaSaid || !stopSaid || len(refused) != 2 {
		t.Errorf("DrainMoveRefused %q: want one naming the HPA, one saying the move stopped", refused)
	}
	framework.Eventually(t, 30*time.Second, "gitops left as the tool set it, no move record", func(ctx context.Context) (bool, string, error) {
		d, err := client.AppsV1().Deployments("default").Get(ctx, "gitops", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, rec := d.Annotations[drain.AnnotationMove]
		return *d.Spec.Replicas == 1 && !rec, fmt.Sprintf("replicas %d, record %v", *d.Spec.Replicas, rec), nil
	})
	if d, err := client.AppsV1().Deployments("default").Get(ctx, "scaled", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 || d.Annotations[drain.AnnotationMove] != "" {
		t.Errorf("the HPA's Deployment was touched: %v", err)
	}
	for result, want := range map[string]float64{"refused": 1, "aborted": 1, "moved": 0} {
		if got := ns.Metric(t, "nodeshepherd_drain_moves_total", map[string]string{"result": result}); got != want {
			t.Errorf("moves_total{result=%s} = %v, want %v", result, got, want)
		}
	}
}

// TestDrainDoesNotSurgeReadWriteOnceClaim (issue 46 point 6): a
// Deployment's pods that share a ReadWriteOnce PersistentVolumeClaim are
// not moved: a surge pod could not use the volume while the pod on the node
// holds it, and would wait until the move's timeout. The drain says why (one
// DrainMoveRefused naming the claim and its access mode), never scales the
// Deployment (its generation stays, no move started) and evicts as usual
// (the budget refuses: the drain waits). As deploy/'s ServiceAccount (the
// claim is read through the drain's RBAC).
func TestDrainDoesNotSurgeReadWriteOnceClaim(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick, other := names[0], names[1]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.MoveBeforeEvict, d.DrainTimeout = true, 5*time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, persistentVolume("move-data", "manual", v1.ReadWriteOnce, hostPath("/tmp/move-data")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumeClaims("default").Create(ctx, persistentClaim("data", "manual", "move-data", v1.ReadWriteOnce), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "claim data Bound", func(ctx context.Context) (bool, string, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return pvc.Status.Phase == v1.ClaimBound, string(pvc.Status.Phase), nil
	})
	db := deployment("db", 1)
	db.Spec.Template.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	pinDeployment(t, client, []string{other}, db)
	createPDB(t, client, "db", ptr.To(intstr.FromInt32(1)), nil)
	framework.Eventually(t, 30*time.Second, "PodDisruptionBudget db allows no disruption", func(ctx context.Context) (bool, string, error) {
		b, err := client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1 && b.Status.DisruptionsAllowed == 0, fmt.Sprintf("%+v", b.Status), nil
	})
	before, err := client.AppsV1().Deployments("default").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	_, refused := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainMoveRefused), 1)
	const want = "Not moving before evicting: Deployment default/db's pods share PersistentVolumeClaim data (ReadWriteOnce): a surge pod could not use it while the pod here holds it; evicting as usual"
	if len(refused) != 1 || refused[0] != want {
		t.Errorf("DrainMoveRefused %q, want %q", refused, want)
	}
	// Evicting as usual: the budget refuses, and the drain says so.
	framework.Eventually(t, 60*time.Second, "the budget's refusal counted", func(ctx context.Context) (bool, string, error) {
		got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "blocked-by-pdb"})
		return got >= 1, fmt.Sprintf("blocked-by-pdb %v", got), nil
	})
	d, err := client.AppsV1().Deployments("default").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != before.Generation || *d.Spec.Replicas != 1 || d.Annotations[drain.AnnotationMove] != "" {
		t.Errorf("Deployment db was touched: generation %d -> %d, replicas %d, move record %q", before.Generation, d.Generation, *d.Spec.Replicas, d.Annotations[drain.AnnotationMove])
	}
	for result, want := range map[string]float64{"refused": 1, "started": 0} {
		if got := ns.Metric(t, "nodeshepherd_drain_moves_total", map[string]string{"result": result}); got != want {
			t.Errorf("moves_total{result=%s} = %v, want %v", result, got, want)
		}
	}
	if left, _ := podsOn(ctx, client, sick, "db"); len(left) != 1 {
		t.Errorf("%d db pods on %s, want the one the budget keeps", len(left), sick)
	}
	if n, msgs := eventCount(t, client, sick, drain.EventDrainMoveRefused, 1); n != 1 {
		t.Errorf("%d DrainMoveRefused events, want 1 (one per change of decision): %q", n, msgs)
	}
}

// TestDrainMoveUndoesAFailedMark (issue 46 point 6): when marking the pods
// to move with the lowest pod-deletion-cost fails halfway (the fault proxy
// answers 500 to the second pod's PATCH), the move takes back the cost it
// wrote on the first before the next try, so that no pod keeps it without a
// move record (a later round would skip such a pod and the drain would never
// move it). Here: a 2-replica Deployment (maxSurge 2) on the node, a budget
// with maxUnavailable 0; the first try fails, the second marks both, surges
// by 2, and the drain completes with one move of both pods, no eviction.
func TestDrainMoveUndoesAFailedMark(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick, other := names[0], names[1]
	proxy := framework.StartFaultProxy(t, cfg)
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cfg), drainConfig(func(d *drain.Config) {
		d.MoveBeforeEvict, d.DrainTimeout = true, 3*time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)
	pair := deployment("pair", 2)
	pair.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(2))}}
	pinDeployment(t, client, []string{other}, pair)
	createPDB(t, client, "pair", nil, ptr.To(intstr.FromInt32(0)))
	framework.Eventually(t, 30*time.Second, "PodDisruptionBudget pair allows no disruption", func(ctx context.Context) (bool, string, error) {
		b, err := client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "pair", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 2 && b.Status.DisruptionsAllowed == 0, fmt.Sprintf("%+v", b.Status), nil
	})
	onSick, err := podsOn(ctx, client, sick, "pair")
	if err != nil || len(onSick) != 2 {
		t.Fatalf("want the 2 pair pods on %s: %d, %v", sick, len(onSick), err)
	}
	// The drain is the only writer of pods (not their status) through the
	// proxy: the second such PATCH is the second pod's mark.
	proxy.Inject(framework.FaultRule{Name: "500-second-mark", Kind: framework.FaultStatus, Status: http.StatusInternalServerError,
		Methods: []string{http.MethodPatch}, Resource: "pods", Subresource: "-", Every: 2, Times: 1})

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 2*time.Minute, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if proxy.Injected("500-second-mark") != 1 {
		t.Fatalf("the failed mark was not injected: %s", proxy)
	}
	// The pods' PATCHes in order: mark one (written), mark the other (500),
	// then the first's cost taken back before any new mark.
	var patches []framework.ProxiedRequest
	for _, e := range proxy.SettledLog() {
		if e.Method == http.MethodPatch && e.Resource == "pods" && e.Sub == "" {
			patches = append(patches, e)
		}
	}
	var seq []string
	for _, e := range patches {
		seq = append(seq, fmt.Sprintf("%s:%d:%s", e.Name, e.Status, e.Fault))
	}
	t.Logf("pod PATCHes through the proxy: %v", seq)
	// The undo may also try the pod whose mark failed (refused: nothing
	// of it to take back), before or after the first; what counts is that
	// the first's cost is taken back before any new mark.
	next := 2
	for next < len(patches) && patches[next].Name == patches[1].Name && patches[next].Status != http.StatusOK {
		next++
	}
	if len(patches) < next+2 || patches[0].Status != http.StatusOK || patches[1].Fault != "500-second-mark" ||
		patches[next].Name != patches[0].Name || patches[next].Status != http.StatusOK {
		t.Errorf("pod PATCHes %v: want the first pod marked, the second's mark failed, then the first's cost taken back", seq)
	}
	for _, p := range onSick {
		if _, err := client.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod %s still there (%v): not moved", p.Name, err)
		}
	}
	d, err := client.AppsV1().Deployments("default").Get(ctx, "pair", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || d.Annotations[drain.AnnotationMove] != "" {
		t.Errorf("Deployment pair after the drain: replicas %d, move record %q", *d.Spec.Replicas, d.Annotations[drain.AnnotationMove])
	}
	for result, want := range map[string]float64{"started": 1, "moved": 1} {
		if got := ns.Metric(t, "nodeshepherd_drain_moves_total", map[string]string{"result": result}); got != want {
			t.Errorf("moves_total{result=%s} = %v, want %v (one move of both pods)", result, got, want)
		}
	}
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); got != 0 {
		t.Errorf("%v evictions accepted; both pods should have been moved", got)
	}
	if _, moving := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainMoving), 1); len(moving) != 1 || !strings.Contains(moving[0], "replicas 2 -> 4") {
		t.Errorf("DrainMoving %q: want one move of both pods, replicas 2 -> 4", moving)
	}
}
