package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
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

	// What each controller needs to run and to have work comes from its
	// descriptor (descriptor.Tests: its flags, objects to create after its
	// CRD, and the controllers it needs run along, as ForTests gives them);
	// the nodes are work for every node-driven controller. Made here only:
	// readinessrestore's pod that kube-controller-manager marked NotReady
	// (a status write under its field manager, which objects cannot say).
	extraWork := map[string]func(t *testing.T){
		"readinessrestore": func(t *testing.T) { markedPod(t, client, node) },
	}
	for name := range extraWork {
		if !slices.Contains(controllers.Names, name) {
			t.Fatalf("extraWork names %q, which is no controller", name)
		}
	}
	for _, d := range controllers.Registry() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			name := d.Name
			_, run, err := controllers.ForTests([]string{name})
			if err != nil {
				t.Fatal(err)
			}
			lease := "stuck-" + name
			args := append([]string{"run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=" + strings.Join(run, ","),
				"--leader-elect-resource-name=" + lease}, fastElectionFlags...)
			args = append(append(args, "--controller-progress-timeout="+stuckProgressTimeout.String(),
				"--controller-stop-timeout=5s", "--metrics-bind-address=127.0.0.1:0"), controllers.FlagsForTests(run)...)
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
			var work [][]byte
			for _, n := range run {
				if c := controllerInfo(n).CRD; c != nil {
					work = append(work, c)
				}
			}
			framework.CreateObjects(t, cp.RESTConfig(), "default", append(work, []byte(d.Tests.Work))...)
			if extra := extraWork[name]; extra != nil {
				extra(t)
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

// controllerInfo is the registry's description of the named controller.
func controllerInfo(name string) descriptor.Info {
	for _, d := range controllers.Registry() {
		if d.Name == name {
			return d
		}
	}
	return descriptor.Info{}
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
