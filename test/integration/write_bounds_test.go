package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Every API write has a bound (kube.WriteTimeout), and a write whose answer
// is lost is sent again or re-checked, never assumed either way.

// TestNodeIPAMWriteWithLostAnswer: the podCIDRs patches of more nodes than
// nodeipam has workers reach the API server and their answers never come
// back. Without a bound every worker waits forever and the other nodes get
// no CIDR; with one, the unanswered CIDRs stay reserved for their node (the
// write may have landed: handing them to another node would give one block
// to two), the same write is sent again, and every node ends with its own
// CIDRs and each block is counted once.
func TestNodeIPAMWriteWithLostAnswer(t *testing.T) {
	const nodes, hangs = 8, 5 // more hangs than nodeipam's 4 workers
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	// Before the controller starts: its first writes are the ones to lose.
	proxy.Inject(framework.FaultRule{Name: "hang-patch", Kind: framework.FaultHang, Methods: []string{http.MethodPatch},
		Resource: "nodes", Subresource: "-", Times: hangs})
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), ipamConfig("10.244.0.0/16", 24), onlyIPAM)
	framework.StartFakeNodes(t, fakenode.Config{Client: client, Nodes: nodes})
	cidrs := podCIDRs(t, client, nodes)
	assertDistinct(t, cidrs)
	if got := proxy.Injected("hang-patch"); got != hangs {
		t.Errorf("%d patches lost their answer, want %d (%s)", got, hangs, proxy)
	}
	// Each node's block counted once: none freed while its node holds it,
	// none leaked by a retry.
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d CIDRs in use", nodes), func(context.Context) (bool, string, error) {
		used := ns.Metric(t, "nodeshepherd_nodeipam_cidrs_in_use", map[string]string{"cluster_cidr": "10.244.0.0/16"})
		return used == nodes, fmt.Sprintf("%v in use", used), nil
	})
}

// healthy says whether nodeshepherd's /healthz answers 200.
func healthy(t *testing.T, ns *framework.NodeShepherd) (bool, string) {
	t.Helper()
	resp, err := ns.Get(framework.Context(t), "/healthz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s", resp.Status, body)
}

// TestSchedulerWritesHeldForever (issue 45, hole 4d): the scheduler's
// binding and its volume pre-binding (the PersistentVolume's claimRef, in
// the background goroutine that binds a pod with volumes) each meet a
// request that the API server never answers (held until the client gives
// up). Each gives up at kube.WriteTimeout, the pod is retried, and both
// pods end bound, the volume's claim bound by kube-controller-manager's PV
// controller; meanwhile the scheduler goes on scheduling, and /healthz
// answers 200 (each write is a tracked step, bounded below the progress
// timeout). Before the bound on the pre-binding, its PersistentVolume
// update waited for good and the pod with the volume was never bound.
func TestSchedulerWritesHeldForever(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	proxy.Inject(framework.FaultRule{Name: "hold-binding", Kind: framework.FaultHangUnsent, Methods: []string{http.MethodPost},
		Resource: "pods", Subresource: "binding", Times: 1})
	proxy.Inject(framework.FaultRule{Name: "hold-pv", Kind: framework.FaultHangUnsent, Methods: []string{http.MethodPut},
		Resource: "persistentvolumes", Subresource: "-", Times: 1})
	conf := fastLifecycle(100)
	conf.Scheduler.PodInitialBackoff, conf.Scheduler.PodMaxBackoff = 100*time.Millisecond, time.Second
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), conf,
		func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name, scheduler.Name} })
	waitNodesReady(t, client, m.NodeNames()...)

	pod := func(name string, claim string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if claim != "" {
			p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		}
		framework.Eventually(t, 60*time.Second, "pod "+name+" created", func(ctx context.Context) (bool, string, error) {
			_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
		})
		return p
	}
	bound := func(name string) func(context.Context) (bool, string, error) {
		return func(ctx context.Context) (bool, string, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return p.Spec.NodeName != "", fmt.Sprintf("node %q, conditions %v", p.Spec.NodeName, p.Status.Conditions), nil
		}
	}

	// The binding: held, given up, sent again.
	start := time.Now()
	pod("plain", "")
	framework.Eventually(t, 2*time.Minute, "plain pod bound", bound("plain"))
	if got := proxy.Injected("hold-binding"); got != 1 {
		t.Errorf("%d bindings held, want 1 (%s)", got, proxy)
	}
	if took := time.Since(start); took < kube.WriteTimeout {
		t.Errorf("plain pod bound after %v, before the held binding's bound %v", took, kube.WriteTimeout)
	}

	// The volume's pre-binding: held, given up, the pod retried.
	if _, err := client.StorageV1().StorageClasses().Create(ctx, storageClass("held", "kubernetes.io/no-provisioner", storagev1.VolumeBindingWaitForFirstConsumer), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, persistentVolume("held-pv", "held", v1.ReadWriteOnce, hostPath("/tmp/held")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumeClaims("default").Create(ctx, persistentClaim("held-claim", "held", "", v1.ReadWriteOnce), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod("with-volume", "held-claim")
	// Meanwhile the scheduler goes on: a pod without volumes is bound.
	framework.Eventually(t, 60*time.Second, "the PersistentVolume's update held", func(context.Context) (bool, string, error) {
		return proxy.Injected("hold-pv") == 1, proxy.String(), nil
	})
	pod("meanwhile", "")
	framework.Eventually(t, 60*time.Second, "a pod created while the volume's write is held bound", bound("meanwhile"))
	if ok, why := healthy(t, ns); !ok {
		t.Errorf("/healthz while a write is held: %s", why)
	}
	framework.Eventually(t, 2*time.Minute, "pod with the volume bound", bound("with-volume"))
	framework.Eventually(t, 60*time.Second, "claim bound to the volume", func(ctx context.Context) (bool, string, error) {
		c, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "held-claim", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return c.Status.Phase == v1.ClaimBound && c.Spec.VolumeName == "held-pv", fmt.Sprintf("%s %q", c.Status.Phase, c.Spec.VolumeName), nil
	})
	if ok, why := healthy(t, ns); !ok {
		t.Errorf("/healthz after the held writes: %s", why)
	}
}

// oneRebootLadder: KernelDeadlock for 1s makes a gpu node unhealthy; the
// one step is a reboot through the cloud provider.
const oneRebootLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: gpu}
spec:
  nodeSelector: {matchLabels: {pool: gpu}}
  unhealthy:
  - {type: KernelDeadlock, status: "True", for: 1s}
  healthyHold: 5s
  steps:
  - {action: Reboot, timeout: 5m}
`

// TestRemediationProviderCallHeldForever (issue 45, hole 4d): the
// remediation controller's Reboot request to the fake cloud provider
// meets a write that the API server never answers (the provider's request
// ConfigMap's patch, held until the client gives up). The call gives up at
// its bound (kube.WriteTimeout), counted as an error (no answer, not a
// refusal), the request is sent again with the same ID, and the machine is
// rebooted once; /healthz answers 200 throughout. Before the bound the
// controller's one worker waited for good: no reboot, and no other node
// looked at.
func TestRemediationProviderCallHeldForever(t *testing.T) {
	rig := startRemediationRig(t, oneRebootLadder, "gpu", 2, 2*time.Second)
	cp, client, m, names := rig.cp, rig.client, rig.m, rig.names
	ctx := framework.Context(t)
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	proxy.Inject(framework.FaultRule{Name: "hold-repair-request", Kind: framework.FaultHangUnsent, Methods: []string{http.MethodPatch},
		Resource: "configmaps", Times: 1})
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), cfg, func(o *manager.Options) { o.Controllers = []string{ctrl.Name} })

	victim := names[0]
	boot := getNode(t, client, victim).Status.NodeInfo.BootID
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{victim}},
		Condition: &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the reboot request held", func(context.Context) (bool, string, error) {
		return proxy.Injected("hold-repair-request") == 1, proxy.String(), nil
	})
	held := time.Now()
	if ok, why := healthy(t, ns); !ok {
		t.Errorf("/healthz while the provider call is held: %s", why)
	}
	framework.Eventually(t, 2*time.Minute, victim+" rebooted (a new boot ID)", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Status.NodeInfo.BootID != boot, n.Status.NodeInfo.BootID, nil
	})
	if took := time.Since(held); took < kube.WriteTimeout-time.Second {
		t.Errorf("rebooted %v after the request was held, before its bound %v", took, kube.WriteTimeout)
	}
	if got := ns.Metric(t, "nodeshepherd_remediation_provider_requests_total", map[string]string{"action": "Reboot", "result": "error"}); got < 1 {
		t.Errorf("provider_requests_total{Reboot,error} = %v, want the held call counted as an error", got)
	}
	if got := ns.Metric(t, "nodeshepherd_remediation_provider_requests_total", map[string]string{"action": "Reboot", "result": "accepted"}); got != 1 {
		t.Errorf("provider_requests_total{Reboot,accepted} = %v, want 1", got)
	}
	cm, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := fakecloud.ParseRequest(cm.Data[victim]); err != nil || r.Action != fakecloud.ActionReboot {
		t.Errorf("the request of %s: %+v, %v", victim, r, err)
	}
	if ok, why := healthy(t, ns); !ok {
		t.Errorf("/healthz after the held call: %s", why)
	}
}
