package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/cloudnodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/readinessrestore"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Faults on the API path for every controller the fault tests of
// faults_test.go (taint eviction, drain) do not cover (issue 30, point 5):
// nodelifecycle, outofservice, nodeipam, cloudnodelifecycle, readinessrestore
// and the scheduler. Each test starts one control plane and one controller
// behind framework.FaultProxy and puts it through the same faults in
// sequence, one subtest each: its writes answered 429 (Retry-After) and 500,
// a write that lands but whose answer never comes (the client gives up after
// kube.WriteTimeout), its watches cut, its watches and relists answered 410
// Gone, and kube-apiserver restarted mid-work. Each fault gets its own piece
// of work (a node, a pod), and the controller must bring it to the right end
// state with each effect written once.

// apiFault is one fault of the sequence.
type apiFault struct {
	name string
	// write is injected into each of the controller's kinds of write
	// (Methods, Resource and Subresource are filled in).
	write   *framework.FaultRule
	gone    bool // 410 Gone to its watches and lists that resume
	drop    bool // cut its watches once armed
	restart bool // restart kube-apiserver once the work is set going
}

var apiFaults = []apiFault{
	{name: "429", write: &framework.FaultRule{Kind: framework.FaultStatus, Status: http.StatusTooManyRequests, RetryAfter: 1, Times: 2}},
	{name: "500", write: &framework.FaultRule{Kind: framework.FaultStatus, Status: http.StatusInternalServerError, Times: 2}},
	{name: "lost-answer", write: &framework.FaultRule{Kind: framework.FaultHang, Times: 1}},
	{name: "dropped-watch", drop: true},
	{name: "410-gone", gone: true, drop: true},
	{name: "apiserver-restart", restart: true},
}

// apiWrite is a kind of write of a controller.
type apiWrite struct{ method, resource, sub string }

// underAPIFaults runs one subtest per fault of apiFaults, in order: the
// fault is armed on writes (or on the watches of watched), start sets the
// i-th piece of work going, kube-apiserver is restarted if the fault says
// so, and check waits for the work's end state and asserts it. A fault
// armed that never fired fails the subtest; the rules stop at its end.
func underAPIFaults(t *testing.T, cp *controlplane.ControlPlane, p *framework.FaultProxy, writes []apiWrite, watched []string,
	start, check func(t *testing.T, i int, f apiFault)) {
	for i, f := range apiFaults {
		if !t.Run(f.name, func(t *testing.T) {
			var armed []*framework.FaultRule
			if f.write != nil {
				for _, w := range writes {
					r := *f.write
					r.Name = fmt.Sprintf("%s %s %s/%s", f.name, w.method, w.resource, w.sub)
					r.Methods, r.Resource, r.Subresource = []string{w.method}, w.resource, w.sub
					armed = append(armed, p.Inject(r))
				}
			}
			if f.gone {
				for _, res := range watched {
					armed = append(armed, p.Inject(framework.FaultRule{Name: f.name + " " + res, Kind: framework.FaultGone, Resource: res, ResumeOnly: true, Times: 2}))
				}
			}
			defer func() {
				for _, r := range armed {
					p.Stop(r)
				}
			}()
			if f.drop {
				if n := p.DropWatches(); n == 0 {
					t.Fatal("no watch through the proxy to cut")
				}
			}
			start(t, i, f)
			if f.restart {
				if err := cp.RestartAPIServer(framework.Context(t), 2*time.Second); err != nil {
					t.Fatalf("restarting kube-apiserver: %v", err)
				}
			}
			check(t, i, f)
			fired := 0
			for _, r := range armed {
				fired += p.Injected(r.Name)
			}
			if len(armed) > 0 && fired == 0 {
				t.Errorf("the fault was armed but never injected: %s", p)
			}
			t.Logf("faults so far: %s", p)
		}) {
			return // the next faults would only fail for this one's leftovers
		}
	}
}

// acceptedWrites counts the proxied writes of a kind to one object that the
// API server accepted (2xx), whether or not their answer reached the client.
func acceptedWrites(p *framework.FaultProxy, w apiWrite, name string) int {
	sub := w.sub
	if sub == "-" { // a rule's "no subresource" is "" in the log
		sub = ""
	}
	return reachedWrites(p, w.method, w.resource, sub)[name]
}

// reachedAttempts counts the writes of w to the named object that reached
// the API server, whatever their answer (none, when the client gave up).
func reachedAttempts(p *framework.FaultProxy, w apiWrite, name string) int {
	n := 0
	for _, e := range p.SettledLog() {
		if e.Method == w.method && e.Resource == w.resource && (e.Sub == w.sub || w.sub == "-" && e.Sub == "") && e.Reached && e.Name == name {
			n++
		}
	}
	return n
}

// eventsFor counts the events of reason about the named object (node or
// pod of the default namespace), with the recorder's aggregation counts.
func eventsFor(t *testing.T, client kubernetes.Interface, object, reason string) int32 {
	t.Helper()
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(framework.Context(t),
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + object + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range evs.Items {
		n += max(e.Count, 1)
	}
	return n
}

// settledEvents waits until the events of reason about object reach want
// and checks there are no more: a second one is a write repeated.
func settledEvents(t *testing.T, client kubernetes.Interface, object, reason string, want int32) {
	t.Helper()
	if got, msgs := framework.WaitEvents(t, client, "reason="+reason+",involvedObject.name="+object, want); got != want {
		t.Errorf("%d %s events about %s, want %d: %q", got, reason, object, want, msgs)
	}
}

// TestNodeLifecycleUnderAPIFaults: for each fault a node with one pod is
// partitioned and healed. Its Ready=Unknown status, NoExecute taint and pod
// mark are written through the faults (PUT nodes/status, PATCH nodes, PATCH
// pods/status): the node ends Unknown and tainted, counted as one eviction,
// its pod marked NotReady once (one event); healed, it loses the taints. A
// write that never answers must not hold the monitor loop: without
// kube.WriteTimeout the lost taint PATCH blocks it for good (nothing is
// tainted or untainted after it).
func TestNodeLifecycleUnderAPIFaults(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 8, false))
	names := m.NodeNames()
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), fastLifecycle(100),
		func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name} })
	waitNodesReady(t, client, names...)
	for i := range apiFaults {
		createPod(t, client, fmt.Sprintf("nl-%d", i), names[i], tolerations(nil))
	}
	for i := range apiFaults {
		framework.Eventually(t, time.Minute, "pods Ready", podReadyIs(client, fmt.Sprintf("nl-%d", i), v1.ConditionTrue))
	}
	writes := []apiWrite{{http.MethodPut, "nodes", "status"}, {http.MethodPatch, "nodes", "-"}, {http.MethodPatch, "pods", "status"}}
	noSchedule := v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule}
	underAPIFaults(t, cp, proxy, writes, []string{"nodes", "pods", "leases"},
		func(t *testing.T, i int, _ apiFault) {
			partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{names[i]}})
		},
		func(t *testing.T, i int, _ apiFault) {
			victim, pod := names[i], fmt.Sprintf("nl-%d", i)
			framework.Eventually(t, 90*time.Second, victim+" Unknown", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
			framework.Eventually(t, 90*time.Second, victim+" tainted unreachable:NoExecute", nodeTainted(client, victim, nodelifecycle.UnreachableTaint, true))
			framework.Eventually(t, 90*time.Second, victim+" tainted unreachable:NoSchedule", nodeTainted(client, victim, noSchedule, true))
			framework.Eventually(t, 90*time.Second, pod+" marked NotReady", podReadyIs(client, pod, v1.ConditionFalse))
			framework.Eventually(t, 60*time.Second, "one eviction counted per victim", func(context.Context) (bool, string, error) {
				n := ns.Metric(t, "node_collector_evictions_total", nil)
				return n == float64(i+1), fmt.Sprintf("%v evictions counted", n), nil
			})
			settledEvents(t, client, pod, nodelifecycle.EventNodeNotReady, 1)
			if n := ns.Metric(t, "nodeshepherd_nodelifecycle_pods_marked_not_ready_total", nil); n != float64(i+1) {
				t.Errorf("%v pods counted as marked NotReady, want %d", n, i+1)
			}
			partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{victim}})
			framework.Eventually(t, 90*time.Second, victim+" Ready again", nodeCondition(client, victim, v1.NodeReady, v1.ConditionTrue))
			framework.Eventually(t, 90*time.Second, victim+" untainted", nodeTainted(client, victim, nodelifecycle.UnreachableTaint, false))
			framework.Eventually(t, 90*time.Second, victim+" NoSchedule lifted", nodeTainted(client, victim, noSchedule, false))
			if n := ns.Metric(t, "node_collector_evictions_total", nil); n != float64(i+1) {
				t.Errorf("%v evictions counted after the heal, want %d", n, i+1)
			}
		})
}

// TestOutOfServiceUnderAPIFaults: for each fault a partitioned node is
// confirmed dead by a person; outofservice records the confirmation and
// taints it out of service (PUT nodes) through the faults. Each node ends
// tainted with one OutOfServiceTaintAdded event and one decision counted;
// no update is accepted twice (each carries the resourceVersion it was
// computed from).
func TestOutOfServiceUnderAPIFaults(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 10, false))
	names := m.NodeNames()
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), oosConfig(fastLifecycle(100), 10),
		func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name, outofservice.Name} })
	waitNodesReady(t, client, names...)
	update := apiWrite{http.MethodPut, "nodes", "-"}
	underAPIFaults(t, cp, proxy, []apiWrite{update}, []string{"nodes"},
		func(t *testing.T, i int, _ apiFault) {
			partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{names[i]}})
			annotateOutOfService(t, client, names[i], ptr.To(fmt.Sprintf("fault %d", i)))
		},
		func(t *testing.T, i int, _ apiFault) {
			victim := names[i]
			framework.Eventually(t, 90*time.Second, victim+" tainted out of service", nodeTainted(client, victim, outofservice.Taint, true))
			settledEvents(t, client, victim, outofservice.EventTaintAdded, 1)
			framework.Eventually(t, 60*time.Second, "one taint decision counted per node", func(context.Context) (bool, string, error) {
				n := ns.Metric(t, "nodeshepherd_outofservice_decisions_total", map[string]string{"action": "taint"})
				return n == float64(i+1), fmt.Sprintf("%v taint decisions counted", n), nil
			})
			// The confirmation's boot ID and the taint: two updates.
			if got := acceptedWrites(proxy, update, victim); got != 2 {
				t.Errorf("%d updates of %s accepted, want 2 (record the confirmation, taint)", got, victim)
			}
			// At most one: an event sent while kube-apiserver is down is
			// dropped by client-go's recorder (it does not retry a 5xx).
			if got := eventsFor(t, client, victim, outofservice.EventConfirmationRecorded); got > 1 {
				t.Errorf("%d %s events, want 1", got, outofservice.EventConfirmationRecorded)
			}
		})
}

// TestNodeIPAMUnderAPIFaults: for each fault three nodes join; nodeipam
// writes their podCIDRs (PATCH nodes) through the faults. Every node ends
// with its own CIDR, the CIDRs of the nodes before never change, and the
// blocks in use are counted once each.
func TestNodeIPAMUnderAPIFaults(t *testing.T) {
	const perFault = 3
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), ipamConfig("10.244.0.0/16", 24), onlyIPAM)
	before := map[string][]string{}
	underAPIFaults(t, cp, proxy, []apiWrite{{http.MethodPatch, "nodes", "-"}}, []string{"nodes"},
		func(t *testing.T, i int, _ apiFault) {
			for j := range perFault {
				n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ipam-%d-%d", i, j)}}
				framework.Eventually(t, 60*time.Second, "node "+n.Name+" created", func(ctx context.Context) (bool, string, error) {
					_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
					return err == nil, fmt.Sprint(err), nil
				})
			}
		},
		func(t *testing.T, i int, _ apiFault) {
			total := (i + 1) * perFault
			cidrs := podCIDRs(t, client, total)
			assertDistinct(t, cidrs)
			for node, was := range before {
				if !slices.Equal(cidrs[node], was) {
					t.Errorf("%s: podCIDRs %v, were %v", node, cidrs[node], was)
				}
			}
			maps.Copy(before, cidrs)
			framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d CIDRs in use", total), func(context.Context) (bool, string, error) {
				used := ns.Metric(t, "nodeshepherd_nodeipam_cidrs_in_use", map[string]string{"cluster_cidr": "10.244.0.0/16"})
				return used == float64(total), fmt.Sprintf("%v in use", used), nil
			})
		})
}

// TestCloudNodeLifecycleUnderAPIFaults: for each fault the machine of one
// node is deleted; cloudnodelifecycle deletes the node (DELETE nodes, with
// the node's UID as precondition) through the faults. The node is gone,
// exactly one DELETE of it was accepted, and no other node was deleted.
func TestCloudNodeLifecycleUnderAPIFaults(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 10, false))
	names := m.NodeNames()
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), cloudConfig("fake", 100, "45%"),
		func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name, cloudnodelifecycle.Name} })
	waitNodesReady(t, client, names...)
	del := apiWrite{http.MethodDelete, "nodes", ""}
	underAPIFaults(t, cp, proxy, []apiWrite{del}, []string{"nodes"},
		func(t *testing.T, i int, _ apiFault) { machine(t, m, fakenode.MachineDelete, names[i]) },
		func(t *testing.T, i int, _ apiFault) {
			victim := names[i]
			framework.Eventually(t, 90*time.Second, victim+" deleted", nodeGone(client, victim))
			if got := acceptedWrites(proxy, del, victim); got != 1 {
				t.Errorf("%d DELETEs of %s accepted, want 1", got, victim)
			}
			nodes, err := client.CoreV1().Nodes().List(framework.Context(t), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(nodes.Items), len(names)-(i+1); got != want {
				t.Errorf("%d nodes left, want %d", got, want)
			}
		})
}

// TestReadinessRestoreUnderAPIFaults: for each fault a node of a managed
// cluster (kube-controller-manager marks the pods of a silent node NotReady;
// the 1.15 kubelets never re-post them) is partitioned and healed;
// readinessrestore gives its pod's readiness back (PUT pods/status) through
// the faults: the pod ends Ready, with one PodReadinessRestored event and
// one restore counted.
func TestReadinessRestoreUnderAPIFaults(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Controllers: "*",
		ControllerManagerArgs: []string{"--node-monitor-period=1s", "--node-monitor-grace-period=" + testGrace.String()}})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 8, true))
	names := m.NodeNames()
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ctrl := controllers.Default()
	ctrl.ReadinessRestore.Delay = time.Second
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), ctrl,
		func(o *manager.Options) { o.Controllers = []string{readinessrestore.Name} })
	waitNodesReady(t, client, names...)
	for i := range apiFaults {
		createPod(t, client, fmt.Sprintf("rr-%d", i), names[i], tolerations(nil))
	}
	for i := range apiFaults {
		framework.Eventually(t, time.Minute, "pods Ready", podReadyIs(client, fmt.Sprintf("rr-%d", i), v1.ConditionTrue))
	}
	underAPIFaults(t, cp, proxy, []apiWrite{{http.MethodPut, "pods", "status"}}, []string{"pods", "nodes"},
		func(t *testing.T, i int, _ apiFault) {
			partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{names[i]}})
		},
		func(t *testing.T, i int, _ apiFault) {
			victim, pod := names[i], fmt.Sprintf("rr-%d", i)
			framework.Eventually(t, 90*time.Second, pod+" marked NotReady by kube-controller-manager", podReadyIs(client, pod, v1.ConditionFalse))
			partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{victim}})
			framework.Eventually(t, 90*time.Second, victim+" Ready again", nodeCondition(client, victim, v1.NodeReady, v1.ConditionTrue))
			framework.Eventually(t, 90*time.Second, pod+" readiness restored", podReadyIs(client, pod, v1.ConditionTrue))
			settledEvents(t, client, pod, readinessrestore.EventReadinessRestored, 1)
			// One restore counted per restore made, a lost answer's too. Not
			// i+1: a fault that takes kube-apiserver away for longer than the
			// 3 s grace (apiserver-restart) makes kube-controller-manager
			// mark every node's pods NotReady, and their restores count too.
			framework.Eventually(t, 60*time.Second, "one restore counted per restore made", func(ctx context.Context) (bool, string, error) {
				n := ns.Metric(t, "nodeshepherd_readinessrestore_pod_readiness_restored_total", nil)
				evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + readinessrestore.EventReadinessRestored})
				if err != nil {
					return false, "", err
				}
				var made int32
				for _, e := range evs.Items {
					made += max(e.Count, 1)
				}
				return n == float64(made) && n >= float64(i+1), fmt.Sprintf("%v restores counted, %d %s events", n, made, readinessrestore.EventReadinessRestored), nil
			})
		})
}

// TestSchedulerUnderAPIFaults: for each fault three pods are created for
// nodeshepherd's scheduler; it binds them (POST pods/binding) through the
// faults. Every pod ends bound by exactly one binding the API server
// accepted (a binding repeated after a lost answer is refused: the pod is
// bound; one whose answer never came back counts when it reached the API
// server), and stays on the node it was bound to.
func TestSchedulerUnderAPIFaults(t *testing.T) {
	const perFault = 3
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ctrl := fastLifecycle(100)
	ctrl.Scheduler.PodInitialBackoff, ctrl.Scheduler.PodMaxBackoff = 100*time.Millisecond, time.Second
	framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), ctrl,
		func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name, scheduler.Name} })
	waitNodesReady(t, client, m.NodeNames()...)
	bind := apiWrite{http.MethodPost, "pods", "binding"}
	boundTo := map[string]string{}
	underAPIFaults(t, cp, proxy, []apiWrite{bind}, []string{"pods", "nodes"},
		func(t *testing.T, i int, _ apiFault) {
			for j := range perFault {
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sched-%d-%d", i, j), Namespace: "default"},
					Spec: v1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName,
						Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
				framework.Eventually(t, 60*time.Second, "pod "+p.Name+" created", func(ctx context.Context) (bool, string, error) {
					_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
					return err == nil, fmt.Sprint(err), nil
				})
			}
		},
		func(t *testing.T, i int, _ apiFault) {
			framework.Eventually(t, 90*time.Second, "pods bound", func(ctx context.Context) (bool, string, error) {
				for j := range perFault {
					name := fmt.Sprintf("sched-%d-%d", i, j)
					p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, "", err
					}
					if p.Spec.NodeName == "" {
						return false, name + " not bound", nil
					}
					boundTo[name] = p.Spec.NodeName
				}
				return true, "", nil
			})
			for name, node := range boundTo {
				// A binding whose client gave up (its deadline passed while
				// the API server restarted) may have landed with no answer
				// the proxy could see: then none is seen accepted, but one
				// reached the API server. Two accepted would be a second
				// binding.
				if got := acceptedWrites(proxy, bind, name); got > 1 || got == 0 && reachedAttempts(proxy, bind, name) == 0 {
					t.Errorf("%d bindings of %s accepted (%d reached the API server), want 1", got, name, reachedAttempts(proxy, bind, name))
				}
				p, err := client.CoreV1().Pods("default").Get(framework.Context(t), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p.Spec.NodeName != node {
					t.Errorf("%s on %s, was bound to %s", name, p.Spec.NodeName, node)
				}
			}
		})
}
