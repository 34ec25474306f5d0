package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// brokenLeaderConfig: node lifecycle and taint eviction, a 4 s lease,
// caches given 8 s to sync once leading, a step 20 s.
const brokenLeaderConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle, tainteviction]
  controllerStartTimeout: 8s
  controllerProgressTimeout: 20s
` + fastElection + `shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 3s
`

// TestBrokenLeaderLetsGo: two `nodeshepherd run` processes; the leader
// breaks after winning the Lease: a controller panics, returns an error,
// stops making progress, or the informer caches never sync (its identity
// may not list pods). Each time the leader exits non-zero and gives up the
// Lease, and the standby leads within the lease duration of that exit.
func TestBrokenLeaderLetsGo(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	framework.StartFakeNodes(t, fastNodes(client, 2, false))
	conf := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(conf, []byte(brokenLeaderConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	noPods := noPodsKubeconfig(t, cp, client)
	for _, tc := range []struct {
		name, fault, kubeconfig, wantLog string
		within                           time.Duration // from leading to exit
	}{
		{"controller panics", "panic:nodelifecycle:2s", cp.KubeconfigPath(), "controller nodelifecycle panicked", 30 * time.Second},
		{"controller returns an error", "exit:nodelifecycle:2s", cp.KubeconfigPath(), "injected by", 30 * time.Second},
		// 20 s without a turn, then 20 s (--controller-stop-timeout) for the stuck turn to end
		{"controller stops making progress", "hang:nodelifecycle", cp.KubeconfigPath(), "controller nodelifecycle is not working", 90 * time.Second},
		{"caches never sync", "", noPods, "informer caches did not sync within 8s", 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := framework.StartFaultBinary(t, tc.fault, "run", "--kubeconfig", tc.kubeconfig, "--config", conf, "--metrics-bind-address", "0")
			exited := make(chan error, 1)
			go func() { exited <- leader.Wait() }()
			waitHolder(t, client, leader.Process.Pid, 30*time.Second)
			leading := time.Now()
			standby := framework.StartBinary(t, "run", "--kubeconfig", cp.KubeconfigPath(), "--config", conf, "--metrics-bind-address", "0")
			var err error
			select {
			case err = <-exited:
			case <-time.After(tc.within):
				t.Fatalf("the broken leader still runs %v after it began leading", tc.within)
			}
			exitedAt := time.Now()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
				t.Fatalf("the broken leader exited with %v, want a non-zero exit code", err)
			}
			t.Logf("broken leader exited %v after it began leading: %v", exitedAt.Sub(leading).Round(time.Millisecond), err)
			waitHolder(t, client, standby.Process.Pid, 4*time.Second+10*time.Second) // lease duration, plus slack for a busy machine (the log says how long it took)
			t.Logf("standby leads %v after the broken leader exited", time.Since(exitedAt).Round(time.Millisecond))
			if log := binaryLog(t, leader); !strings.Contains(log, tc.wantLog) {
				t.Errorf("the broken leader's log does not say %q:\n%s", tc.wantLog, tail(log, 30))
			}
			_ = standby.Process.Kill()
			_, _ = standby.Process.Wait()
			// The next case starts with a free Lease.
			waitHolder(t, client, 0, time.Minute)
		})
	}
}

// waitHolder waits until the nodeshepherd Lease is held by the process with
// pid (its identity is host_pid_suffix), or by nobody (pid 0, or expired).
func waitHolder(t *testing.T, client kubernetes.Interface, pid int, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, fmt.Sprintf("lease held by pid %d", pid), func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeshepherd", metav1.GetOptions{})
		if err != nil {
			return pid == 0, err.Error(), nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if pid == 0 {
			expired := l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > 4*time.Second
			return holder == "" || expired, "holder " + holder, nil
		}
		return strings.Contains(holder, fmt.Sprintf("_%d_", pid)), "holder " + holder, nil
	})
}

// noPodsKubeconfig is a kubeconfig of a ServiceAccount that may elect a
// leader and read nodes, but not list pods: its caches never sync.
func noPodsKubeconfig(t *testing.T, cp *controlplane.ControlPlane, client kubernetes.Interface) string {
	t.Helper()
	ctx := framework.Context(t)
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-pods", Namespace: "kube-system"}}
	if _, err := client.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "no-pods"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "no-pods", Namespace: "kube-system"}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "no-pods",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return framework.WriteKubeconfig(t, cp.Server(), cp.CAData(), tr.Status.Token)
}

// binaryLog reads the log file StartBinary gave the process.
func binaryLog(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	f, ok := cmd.Stdout.(*os.File)
	if !ok {
		return ""
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
