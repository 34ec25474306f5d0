package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Faults on the API path (#21, point 7): nodeshepherd talks to the API server
// through framework.FaultProxy, which answers 429 and 500, lets writes take
// effect and then withholds the answer past the controllers' patience, cuts
// watches and answers 410 Gone when they resume; fake nodes and the test's
// own checks talk to the API server directly. Whatever is injected, every
// pod that must go goes, through exactly one write that reached the API
// server, with one event, and the metrics count what happened.

// watchFaults cuts the pod and node watches of the proxied client a few
// seconds in, and answers 410 Gone to some of the watches that resume from
// where they were cut, so that the informers relist.
func watchFaults(p *framework.FaultProxy) {
	for _, res := range []string{"pods", "nodes"} {
		p.Inject(framework.FaultRule{Name: "gone-" + res, Kind: framework.FaultGone, Resource: res, ResumeOnly: true, Times: 2})
		p.Inject(framework.FaultRule{Name: "drop-" + res, Kind: framework.FaultDropWatch, Resource: res, Watch: true, After: 2 * time.Second, Times: 6})
	}
}

// watchFaultsFired waits until the watches were cut and answered 410 Gone
// when they resumed.
func watchFaultsFired(t *testing.T, p *framework.FaultProxy) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "watch faults injected", func(context.Context) (bool, string, error) {
		return p.Injected("drop-pods") > 0 && p.Injected("gone-pods") > 0 && p.Injected("gone-nodes") > 0, p.String(), nil
	})
}

// reachedWrites counts, per object name, the proxied writes of a kind
// (method, resource, subresource) that the API server accepted (2xx).
func reachedWrites(p *framework.FaultProxy, method, resource, sub string) map[string]int {
	out := map[string]int{}
	for _, e := range p.SettledLog() {
		if e.Method == method && e.Resource == resource && e.Sub == sub && e.Reached && e.Status >= 200 && e.Status < 300 {
			out[e.Name]++
		}
	}
	return out
}

// proxyHost is the host label of the proxied client's rest_client_* series.
func proxyHost(t *testing.T, p *framework.FaultProxy) string {
	u, err := url.Parse(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestTaintEvictionUnderAPIFaults: twelve pods must leave a NoExecute-tainted
// node while the controller's pod and node watches are cut and answered 410
// Gone, two DELETEs take effect but never answer, DELETEs answer 500 and the
// DisruptionTarget status patches 429 with Retry-After. Every pod is deleted
// with its DisruptionTarget condition, by exactly one DELETE that reached
// the API server, with one "Marking for deletion" event; the deletions, the
// failed attempts and client-go's requests by code are counted.
func TestTaintEvictionUnderAPIFaults(t *testing.T) {
	cp, client := teCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 1, false))
	node := m.NodeNames()[0]
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	watchFaults(proxy)
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), controllers.Default(), tainteviction1)
	const pods = 12
	var names []string
	for i := range pods {
		name := fmt.Sprintf("victim-%02d", i)
		names = append(names, name)
		createTEPod(t, client, name, node, nil, []string{holdFinalizer})
	}
	proxy.Inject(framework.FaultRule{Name: "hang-delete", Kind: framework.FaultHang, Methods: []string{http.MethodDelete}, Resource: "pods", Times: 2})
	proxy.Inject(framework.FaultRule{Name: "500-delete", Kind: framework.FaultStatus, Status: http.StatusInternalServerError,
		Methods: []string{http.MethodDelete}, Resource: "pods", Every: 2, Times: 4})
	proxy.Inject(framework.FaultRule{Name: "429-status", Kind: framework.FaultStatus, Status: http.StatusTooManyRequests, RetryAfter: 1,
		Methods: []string{http.MethodPatch}, Resource: "pods", Subresource: "status", Every: 2, Times: 4})
	proxy.DropWatches()
	tainted := time.Now()
	setNoExecuteTaints(t, client, node, teTaint("nodeshepherd.io/faults"))

	for _, name := range names {
		deletedAt(t, client, name, 60*time.Second)
	}
	t.Logf("all %d pods deleted %v after the taint; faults: %s", pods, time.Since(tainted).Round(time.Millisecond), proxy)
	watchFaultsFired(t, proxy)
	proxy.Clear() // from now on the counts hold still
	hung, failed := proxy.Injected("hang-delete"), proxy.Injected("500-delete")
	if hung != 2 || failed == 0 || proxy.Injected("429-status") == 0 {
		t.Fatalf("the write faults were not all injected: %s", proxy)
	}
	// The answers of the hung DELETEs come back as timeouts after
	// kube.WriteTimeout; then every deletion is counted, once.
	framework.Eventually(t, 40*time.Second, "every deletion counted", func(context.Context) (bool, string, error) {
		n := ns.Metric(t, "taint_eviction_controller_pod_deletions_total", nil)
		return n == pods, fmt.Sprintf("%v deletions counted", n), nil
	})
	deletes := reachedWrites(proxy, http.MethodDelete, "pods", "")
	for _, name := range names {
		if deletes[name] != 1 {
			t.Errorf("%s: %d DELETEs reached the API server, want 1", name, deletes[name])
		}
		if marks, _ := evictionMarks(t, client, name); sum(marks) != 1 {
			t.Errorf("%s: %d Marking for deletion events, want 1", name, sum(marks))
		}
	}
	if n := ns.Metric(t, "taint_eviction_controller_pod_deletions_total", nil); n != pods {
		t.Errorf("%v deletions counted, want %d", n, pods)
	}
	if n := ns.Metric(t, "nodeshepherd_tainteviction_pod_deletion_errors_total", nil); int(n) != hung+failed {
		t.Errorf("%v failed deletion attempts counted, want %d (%d timeouts, %d 500s)", n, hung+failed, hung, failed)
	}
	host := proxyHost(t, proxy)
	for _, c := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"code": "500", "method": "DELETE", "host": host}, failed},
		{map[string]string{"code": "<error>", "method": "DELETE", "host": host}, hung},
		{map[string]string{"code": "429", "method": "PATCH", "host": host}, proxy.Injected("429-status")},
		{map[string]string{"code": "410", "method": "GET", "host": host}, proxy.Injected("gone-pods") + proxy.Injected("gone-nodes")},
	} {
		if got := ns.Metric(t, "rest_client_requests_total", c.labels); int(got) != c.want {
			t.Errorf("rest_client_requests_total%v = %v, want %d", c.labels, got, c.want)
		}
	}
	if got := ns.Metric(t, "rest_client_request_retries_total", map[string]string{"verb": "PATCH", "host": host}); int(got) < proxy.Injected("429-status") {
		t.Errorf("rest_client_request_retries_total{verb=PATCH} = %v, want one retry per 429 (%d)", got, proxy.Injected("429-status"))
	}
	t.Logf("faults injected: %s", proxy)
}

// TestDrainUnderAPIFaults: a KernelDeadlock node with six web pods is
// cordoned and drained while the controllers' watches are cut and answered
// 410 Gone, the first cordon PATCH answers 500, two evictions take effect but
// never answer, two are throttled (429 without a budget's cause) and some
// answer 500. The node is cordoned once (one CordonSucceeded), each web pod
// is evicted by exactly one eviction that reached the API server, the drain
// completes once, and the throttled evictions count as errors, not as
// refusals by a PodDisruptionBudget.
func TestDrainUnderAPIFaults(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	sick := names[0]
	proxy := framework.StartFaultProxy(t, cfg)
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cfg), drainConfig(nil), nil)
	waitNodesReady(t, client, names...)
	for _, n := range names[1:] {
		framework.SetUnschedulable(t, client, n, true)
	}
	createDeployment(t, client, deployment("web", 6))
	framework.Eventually(t, 60*time.Second, "web ready on "+sick, deploymentReady(client, "web", 6))
	for _, n := range names[1:] {
		framework.SetUnschedulable(t, client, n, false)
	}
	// nodelifecycle mirrors the uncordon by patching the unschedulable taint
	// away; that PATCH must be done before the 500 for the cordon is armed,
	// or on a busy machine it takes the 500 in the drain's place.
	framework.Eventually(t, 60*time.Second, "unschedulable taints of the uncordoned nodes gone", func(ctx context.Context) (bool, string, error) {
		for _, n := range names[1:] {
			node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, taint := range node.Spec.Taints {
				if taint.Key == v1.TaintNodeUnschedulable {
					return false, n + " still has " + taint.ToString(), nil
				}
			}
		}
		return true, "", nil
	})
	onSick, err := podsOn(framework.Context(t), client, sick, "web")
	if err != nil || len(onSick) != 6 {
		t.Fatalf("want the 6 web pods on %s: %d, %v", sick, len(onSick), err)
	}

	watchFaults(proxy)
	if n := proxy.DropWatches(); n == 0 {
		t.Fatal("no watch through the proxy to cut")
	}
	proxy.Inject(framework.FaultRule{Name: "500-cordon", Kind: framework.FaultStatus, Status: http.StatusInternalServerError,
		Methods: []string{http.MethodPatch}, Resource: "nodes", Subresource: "-", Times: 1})
	proxy.Inject(framework.FaultRule{Name: "hang-evict", Kind: framework.FaultHang, Methods: []string{http.MethodPost}, Resource: "pods", Subresource: "eviction", Times: 2})
	proxy.Inject(framework.FaultRule{Name: "429-evict", Kind: framework.FaultStatus, Status: http.StatusTooManyRequests,
		Methods: []string{http.MethodPost}, Resource: "pods", Subresource: "eviction", Times: 2})
	proxy.Inject(framework.FaultRule{Name: "500-evict", Kind: framework.FaultStatus, Status: http.StatusInternalServerError,
		Methods: []string{http.MethodPost}, Resource: "pods", Subresource: "eviction", Every: 2, Times: 2})
	start := time.Now()
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 90*time.Second, "drain of "+sick+" completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	t.Logf("drained %v after the condition; faults: %s", time.Since(start).Round(time.Millisecond), proxy)
	watchFaultsFired(t, proxy)
	proxy.Clear() // from now on the counts hold still
	if proxy.Injected("500-cordon") != 1 || proxy.Injected("hang-evict") != 2 || proxy.Injected("429-evict") != 2 {
		t.Fatalf("the write faults were not all injected: %s", proxy)
	}
	framework.Eventually(t, 60*time.Second, "web Running elsewhere", func(ctx context.Context) (bool, string, error) {
		left, err := podsOn(ctx, client, sick, "web")
		ok, msg, _ := deploymentReady(client, "web", 6)(ctx)
		return ok && len(left) == 0 && err == nil, fmt.Sprintf("%s, %d web pods on %s", msg, len(left), sick), err
	})
	evictions := reachedWrites(proxy, http.MethodPost, "pods", "eviction")
	for _, p := range onSick {
		if evictions[p.Name] != 1 {
			t.Errorf("%s: %d evictions reached the API server, want 1", p.Name, evictions[p.Name])
		}
	}
	for reason, want := range map[string]int32{drain.EventCordonSucceeded: 1, drain.EventDrainScheduled: 1, drain.EventDrainSucceeded: 1} {
		if got, msgs := eventCount(t, client, sick, reason, want); got != want {
			t.Errorf("%d %s events, want %d: %q", got, reason, want, msgs)
		}
	}
	if got, _ := eventCount(t, client, sick, drain.EventCordonFailed, 1); got != 1 {
		t.Errorf("%d CordonFailed events, want 1 (the 500)", got)
	}
	if got := ns.Metric(t, "draino_cordoned_nodes_total", map[string]string{"result": "succeeded"}); got != 1 {
		t.Errorf("draino_cordoned_nodes_total{succeeded} = %v, want 1", got)
	}
	if got := ns.Metric(t, "draino_drained_nodes_total", map[string]string{"result": "succeeded"}); got != 1 {
		t.Errorf("draino_drained_nodes_total{succeeded} = %v, want 1", got)
	}
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_blocked_by_pdb_total", nil); got != 0 {
		t.Errorf("%v evictions counted as refused by a PodDisruptionBudget; there is none, the 429s were throttling", got)
	}
	errs := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "error"})
	if want := proxy.Injected("hang-evict") + proxy.Injected("429-evict") + proxy.Injected("500-evict"); int(errs) != want {
		t.Errorf("nodeshepherd_drain_evictions_total{error} = %v, want %d (timeouts, 429s, 500s)", errs, want)
	}
	host := proxyHost(t, proxy)
	if got := ns.Metric(t, "rest_client_requests_total", map[string]string{"code": "429", "method": "POST", "host": host}); int(got) != proxy.Injected("429-evict") {
		t.Errorf("rest_client_requests_total{429,POST} = %v, want %d", got, proxy.Injected("429-evict"))
	}
	_, msgs := eventCount(t, client, sick, drain.EventDrainSucceeded, 1)
	if len(msgs) != 1 || !strings.Contains(msgs[0], "evicted 6 pods") {
		t.Errorf("DrainSucceeded %q: want the 6 web pods counted, those whose eviction never answered too", msgs)
	}
	t.Logf("DrainSucceeded: %s", strings.Join(msgs, "; "))
}

// restartConfig is failoverConfig with kube-controller-manager's
// leader-election timings (15s lease, 10s renew deadline, 2s retry): a
// short API server restart should not cost the leader its Lease.
func restartConfig(t *testing.T) string {
	t.Helper()
	conf := strings.Replace(failoverConfig, `  leaderElectLeaseDuration: 4s
  leaderElectRenewDeadline: 3s
  leaderElectRetryPeriod: 500ms`, `  leaderElectLeaseDuration: 15s
  leaderElectRenewDeadline: 10s
  leaderElectRetryPeriod: 2s`, 1)
	if conf == failoverConfig {
		t.Fatal("failoverConfig no longer has the leader-election block this test replaces")
	}
	return conf
}

// proxyKubeconfig writes a kubeconfig (admin credentials) aimed at the proxy.
func proxyKubeconfig(t *testing.T, proxy *framework.FaultProxy, cfg *rest.Config) string {
	t.Helper()
	pc := proxy.RESTConfig(cfg)
	return framework.WriteKubeconfig(t, pc.Host, pc.CAData, pc.BearerToken)
}

// TestAPIServerRestartMidEvictionAndDrain: two `nodeshepherd run` replicas
// (through the proxy, which only counts) taint-evict ten pods due one after
// another and drain a node of its six web pods under a PodDisruptionBudget
// that lets one go at a time; kube-apiserver is stopped and started again
// while both are in flight. Afterwards every pod that must go has gone,
// through exactly one accepted DELETE or eviction, with one event each; the
// drain completes once; and exactly one replica leads, renewing its Lease.
func TestAPIServerRestartMidEvictionAndDrain(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	names := m.NodeNames()
	dead, sick := names[0], names[1]
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	confPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(confPath, []byte(restartConfig(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := proxyKubeconfig(t, proxy, cp.RESTConfig())
	var cmds []*exec.Cmd
	for range 2 {
		cmd, _ := startListening(t, func(port int) []string {
			return []string{"run", "--kubeconfig", kubeconfig, "--config", confPath, "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port)}
		})
		cmds = append(cmds, cmd)
	}
	waitNodesReady(t, client, names...)
	holder := func(ctx context.Context) (string, int32, time.Time, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeshepherd", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return "", 0, time.Time{}, err
		}
		return *l.Spec.HolderIdentity, ptr.Deref(l.Spec.LeaseTransitions, 0), l.Spec.RenewTime.Time, nil
	}
	var leaderBefore string
	var transitionsBefore int32
	framework.Eventually(t, 30*time.Second, "a leader", func(ctx context.Context) (bool, string, error) {
		id, tr, _, err := holder(ctx)
		leaderBefore, transitionsBefore = id, tr
		return id != "", id, err
	})

	// The drain's pods: web on sick only, one at a time allowed to go.
	for _, n := range names {
		if n != sick {
			framework.SetUnschedulable(t, client, n, true)
		}
	}
	createDeployment(t, client, deployment("web", 6))
	framework.Eventually(t, 60*time.Second, "web ready on "+sick, deploymentReady(client, "web", 6))
	for _, n := range names[2:] {
		framework.SetUnschedulable(t, client, n, false)
	}
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(1)))
	onSick, err := podsOn(ctx, client, sick, "web")
	if err != nil || len(onSick) != 6 {
		t.Fatalf("want the 6 web pods on %s: %d, %v", sick, len(onSick), err)
	}
	// The taint evictions: ten pods on dead, due 2s, 4s, ... 20s after the taint.
	const key, tolPods = "nodeshepherd.io/restart-test", 10
	for i := 1; i <= tolPods; i++ {
		createTEPod(t, client, fmt.Sprintf("tol-%02d", i), dead, nil, []string{holdFinalizer}, teToleration(key, ptr.To(int64(2*i))))
	}

	added := setNoExecuteTaints(t, client, dead, teTaint(key))[0].TimeAdded.Time
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 30*time.Second, "drain in flight", drainCondition(client, sick, v1.ConditionTrue, "scheduled"))
	framework.Eventually(t, 30*time.Second, "first taint eviction", podEvicted(client, "tol-01"))
	stopped := time.Now()
	if err := cp.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver restarted: down %v, from %v after the taint", time.Since(stopped).Round(time.Millisecond), stopped.Sub(added).Round(time.Millisecond))

	for i := 1; i <= tolPods; i++ {
		deletedAt(t, client, fmt.Sprintf("tol-%02d", i), 60*time.Second)
	}
	framework.Eventually(t, 90*time.Second, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	framework.Eventually(t, 60*time.Second, "web Running elsewhere", func(ctx context.Context) (bool, string, error) {
		left, err := podsOn(ctx, client, sick, "web")
		ok, msg, _ := deploymentReady(client, "web", 6)(ctx)
		return ok && len(left) == 0 && err == nil, fmt.Sprintf("%s, %d web pods on %s", msg, len(left), sick), err
	})

	deletes := reachedWrites(proxy, http.MethodDelete, "pods", "")
	for i := 1; i <= tolPods; i++ {
		name := fmt.Sprintf("tol-%02d", i)
		if deletes[name] != 1 {
			t.Errorf("%s: %d DELETEs accepted by the API server, want 1", name, deletes[name])
		}
		if marks, _ := evictionMarks(t, client, name); sum(marks) != 1 {
			t.Errorf("%s: %d Marking for deletion events, want 1", name, sum(marks))
		}
	}
	evictions := reachedWrites(proxy, http.MethodPost, "pods", "eviction")
	for _, p := range onSick {
		if evictions[p.Name] != 1 {
			t.Errorf("%s: %d evictions accepted by the API server, want 1", p.Name, evictions[p.Name])
		}
	}
	for reason, want := range map[string]int32{drain.EventCordonSucceeded: 1, drain.EventDrainSucceeded: 1} {
		if got, msgs := eventCount(t, client, sick, reason, want); got != want {
			t.Errorf("%d %s events, want %d: %q", got, reason, want, msgs)
		}
	}
	badGateway := proxy.Count(func(e framework.ProxiedRequest) bool { return e.Status == http.StatusBadGateway })
	framework.Eventually(t, 30*time.Second, "one leader renewing its Lease", func(ctx context.Context) (bool, string, error) {
		id, tr, renewed, err := holder(ctx)
		return id != "" && time.Since(renewed) < 5*time.Second, fmt.Sprintf("%s renewed %v ago, %d transitions", id, time.Since(renewed), tr), err
	})
	id, transitions, _, _ := holder(ctx)
	if id != leaderBefore {
		// Cleanly: the old leader stopped leading and exited, saying why.
		for _, cmd := range cmds {
			if strings.Contains(leaderBefore, fmt.Sprintf("_%d_", cmd.Process.Pid)) {
				if log := binaryLog(t, cmd); !strings.Contains(log, "lost leadership") {
					t.Errorf("the leader before the restart (%s) does not say it lost leadership:\n%s", leaderBefore, tail(log, 15))
				}
			}
		}
	}
	t.Logf("leader before %s, after %s; lease transitions during the test: %d; %d requests answered 502 while kube-apiserver was down",
		leaderBefore, id, transitions-transitionsBefore, badGateway)
}
