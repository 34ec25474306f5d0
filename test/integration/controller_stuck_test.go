package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// stuckProgressTimeout is the tests' --controller-progress-timeout: the
// least accepted, so that a stuck step shows in seconds.
const stuckProgressTimeout = 20 * time.Second

// TestStuckControllerGivesUpLease: for each controller, two `nodeshepherd
// run` processes elect a leader on a Lease of their own; the leader's
// controller is hung inside a step it tracks (faulthook hang:NAME: a work
// item or a loop's turn that never ends, not even on stop). Its /healthz
// must fail naming the controller and the step, the leader must exit
// non-zero, and the standby must take the Lease over.
func TestStuckControllerGivesUpLease(t *testing.T) {
	// Both builds first: a build in the middle of a subtest would outlast its leader.
	framework.Binary(t)
	framework.FaultBinary(t)
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	nodes := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	node := nodes.NodeNames()[0]
	// Pods need the namespace's ServiceAccount, which no controller makes here.
	if _, err := client.CoreV1().ServiceAccounts("default").Create(framework.Context(t), &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Ready (no kube-controller-manager lifts the registration taints here).
	framework.Eventually(t, time.Minute, "node "+node+" Ready", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return kube.NodeReady(n), "not Ready", nil
	})

	// What each controller needs to run and to have work: nodes (queued at
	// start by every node-driven controller), a pending pod of the
	// scheduler's name, a pod that kube-controller-manager marked NotReady.
	cases := map[string]struct {
		flags []string
		work  func(t *testing.T)
	}{
		"nodelifecycle":      {},
		"tainteviction":      {},
		"nodeipam":           {flags: []string{"--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16"}},
		"cloudnodelifecycle": {flags: []string{"--cloud-provider=fake"}},
		"drain":              {flags: []string{"--drain-condition=KernelDeadlock=True,10m"}},
		"scheduler": {flags: []string{"--scheduler-name=stuck-scheduler"}, work: func(t *testing.T) {
			newPod(t, client, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck-scheduler", Namespace: "default"},
				Spec: v1.PodSpec{SchedulerName: "stuck-scheduler", Containers: []v1.Container{{Name: "c", Image: "pause"}}}})
		}},
		"outofservice":     {},
		"readinessrestore": {flags: []string{"--readiness-restore-delay=1s"}, work: func(t *testing.T) { markedPod(t, client, node) }},
		// With the drain controller it needs; its policies and their CRD are its work.
		"remediation": {flags: []string{"--controllers=drain"}, work: func(t *testing.T) { stuckPolicy(t, cp.RESTConfig()) }},
	}
	if len(cases) != len(controllers.Names) {
		t.Fatalf("%d cases for %d controllers (%v): every controller needs one", len(cases), len(controllers.Names), controllers.Names)
	}
	for _, name := range controllers.Names {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lease := "stuck-" + name
			args := append([]string{"run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=" + name,
				"--leader-elect-resource-name=" + lease, "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
				"--leader-elect-retry-period=500ms", "--controller-progress-timeout=" + stuckProgressTimeout.String(),
				"--controller-stop-timeout=5s", "--metrics-bind-address=127.0.0.1:0"}, tc.flags...)
			leader := framework.StartFaultBinary(t, "hang:"+name, args...)
			exited := make(chan error, 1)
			go func() { exited <- leader.Wait() }()
			waitLeaseHolder(t, client, lease, leader.Process.Pid, time.Minute)
			leading := time.Now()
			// --secure-port=0: the one port the leader listens on is plain HTTP.
			var addr string
			framework.Eventually(t, 30*time.Second, "the leader's plain-HTTP port", func(context.Context) (bool, string, error) {
				ports, err := listening(leader.Process.Pid)
				if err != nil || len(ports) != 1 {
					return false, fmt.Sprintf("ports %v, %v", ports, err), nil
				}
				addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
				return true, "", nil
			})
			standby := framework.StartBinary(t, args...)
			if tc.work != nil {
				tc.work(t)
			}
			want := "controller " + name + " is not working: "
			var body string
			// The bound, a health check a second, and a busy machine.
			framework.Eventually(t, stuckProgressTimeout+60*time.Second, "/healthz failing on the leader", func(ctx context.Context) (bool, string, error) {
				code, b, err := httpGet(ctx, "http://"+addr+"/healthz")
				if err != nil {
					return false, err.Error(), nil
				}
				body = b
				return code == http.StatusInternalServerError && strings.Contains(b, want), fmt.Sprintf("%d %q", code, b), nil
			})
			detected := time.Since(leading)
			if !strings.Contains(body, "busy on ") && !strings.Contains(body, "has not turned for") {
				t.Errorf("/healthz does not say which step is stuck: %q", body)
			}
			select {
			case err := <-exited:
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
					t.Errorf("the stuck leader exited with %v, want a non-zero exit code", err)
				}
			case <-time.After(time.Minute): // --controller-stop-timeout, then the exit
				t.Fatalf("the stuck leader still runs a minute after /healthz failed; log:\n%s", tail(binaryLog(t, leader), 30))
			}
			waitLeaseHolder(t, client, lease, standby.Process.Pid, time.Minute)
			t.Logf("stuck %v after leading: %s; the standby leads %v after leading began", detected.Round(time.Second), body, time.Since(leading).Round(time.Second))
		})
	}
}

// stuckPolicy installs the RemediationPolicy CRD and a policy over every
// node: the remediation controller then has nodes to look at.
func stuckPolicy(t *testing.T, cfg *rest.Config) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cfg)
	if err := remediation.InstallCRD(framework.Context(t), dyn, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	var pol unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(`
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: stuck}
spec:
  unhealthy: [{type: KernelDeadlock, status: "True", for: 1m}]
  healthyHold: 1m
  steps: [{action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/stuck, effect: NoSchedule}}]
`), &pol.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(remediation.GroupVersionResource).Create(framework.Context(t), &pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitLeaseHolder waits until Lease kube-system/name is held by the process
// with pid (its identity is host_pid_suffix).
func waitLeaseHolder(t *testing.T, client kubernetes.Interface, name string, pid int, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, fmt.Sprintf("lease %s held by pid %d", name, pid), func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return strings.Contains(holder, fmt.Sprintf("_%d_", pid)), "holder " + holder, nil
	})
}

func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func newPod(t *testing.T, client kubernetes.Interface, pod *v1.Pod) *v1.Pod {
	t.Helper()
	out, err := client.CoreV1().Pods(pod.Namespace).Create(framework.Context(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// markedPod creates a pod on node whose Ready condition kube-controller-
// manager set False an hour ago (its field manager writes it), as it marks
// the pods of a node it found silent: readinessrestore's work.
func markedPod(t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	pod := newPod(t, client, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck-readinessrestore", Namespace: "default"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "pause"}}}})
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
	if _, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(framework.Context(t), pod,
		metav1.UpdateOptions{FieldManager: companion.KubeControllerManager}); err != nil {
		t.Fatal(err)
	}
}
