package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// kubeSchedulerLeaseLive waits until kube-scheduler's leader Lease is held
// and renewed (live) or released or stale (not live), as the guard reads it.
func kubeSchedulerLeaseLive(t *testing.T, client kubernetes.Interface, live bool) {
	t.Helper()
	framework.Eventually(t, time.Minute, fmt.Sprintf("kube-scheduler's leader Lease live=%v", live), func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases(companion.LeaseNamespace).Get(ctx, companion.KubeScheduler, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return !live, "no Lease", nil
		}
		if err != nil {
			return false, "", err
		}
		holder, age := "", time.Duration(-1)
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil {
			age = time.Since(l.Spec.RenewTime.Time)
		}
		// The guard's rule: held, renewed within the duration (15s) and a second.
		isLive := holder != "" && age >= 0 && age <= 16*time.Second
		return isLive == live, fmt.Sprintf("holder %q, renewed %v ago", holder, age), nil
	})
}

// createUnschedulable creates a pod of schedulerName that no node can take;
// with disk, an inline iSCSI volume, which nodeshepherd's scheduler refuses
// (SchedulerError) while kube-scheduler reports the pod Unschedulable: the
// two write different conditions, so each one's write changes the pod.
func createUnschedulable(t *testing.T, client kubernetes.Interface, name, schedulerName string, disk bool) {
	t.Helper()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{SchedulerName: schedulerName,
		NodeSelector: map[string]string{"example.com/nowhere": "true"}, Containers: []v1.Container{{Name: "c", Image: "pause"}}}}
	if disk {
		p.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{
			TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}}}}
	}
	framework.Eventually(t, 30*time.Second, "pod "+name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil // the default ServiceAccount may not exist yet
	})
}

// podScheduledWrittenBy waits until the pod's PodScheduled=False was written
// by writer (a managedFields entry of its holds the condition).
func podScheduledWrittenBy(t *testing.T, client kubernetes.Interface, name, writer string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "PodScheduled of "+name+" written by "+writer, func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		var managers []string
		for _, e := range p.ManagedFields {
			if e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), `"k:{\"type\":\"PodScheduled\"}"`) {
				managers = append(managers, e.Manager+"/"+e.Subresource)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
				for _, m := range managers {
					if m == writer+"/status" {
						return true, "", nil
					}
				}
			}
		}
		return false, fmt.Sprintf("conditions %v, written by %v", p.Status.Conditions, managers), nil
	})
}

// schedulerNamed is the default configuration with the scheduler serving name.
func schedulerNamed(name string) controllers.Config {
	ctrl := controllers.Default()
	ctrl.Scheduler.SchedulerName = name
	return ctrl
}

// TestCompanionSchedulerRefusedNextToKubeScheduler: with kube-scheduler
// running (leader-elected, as kubeadm and managed clusters run it),
// nodeshepherd's scheduler under default-scheduler is refused, with the
// Lease and the pod kube-scheduler wrote as evidence, an event on each, the
// metric, and exit code 1 from `nodeshepherd run`; under a name of its own,
// or with --allow-conflicting-writers=scheduler, it runs; once kube-scheduler
// is stopped and its Lease expired, it runs as default-scheduler although the
// pending pod still shows what kube-scheduler wrote.
func TestCompanionSchedulerRefusedNextToKubeScheduler(t *testing.T) {
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true, Scheduler: true, SchedulerArgs: []string{"--leader-elect=true"}})
	cfg, client := cp.RESTConfig(), framework.Client(t, cp)
	kubeSchedulerLeaseLive(t, client, true)
	createUnschedulable(t, client, "pending", v1.DefaultSchedulerName, false)
	podScheduledWrittenBy(t, client, "pending", companion.KubeScheduler)

	// (a) Refused at start: the error, the events, the metric.
	ctrl := schedulerNamed(v1.DefaultSchedulerName)
	constructors := controllers.Constructors(ctrl)
	var reg prometheus.Registerer
	build := constructors[scheduler.Name]
	constructors[scheduler.Name] = func(ctx manager.Context) (manager.Controller, error) {
		reg = ctx.Registry
		return build(ctx)
	}
	err := func() error {
		ctx, cancel := context.WithCancel(framework.Context(t))
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- manager.Run(ctx, cfg, manager.Options{Controllers: []string{scheduler.Name}, Constructors: constructors, MetricsBindAddress: "0"})
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(2 * time.Minute):
			t.Fatal("nodeshepherd's scheduler as default-scheduler still runs 2m after its start next to kube-scheduler")
			return nil
		}
	}()
	for _, want := range []string{
		"starting controller scheduler: refusing to run controller scheduler: kube-scheduler schedules the pods of default-scheduler too: its leader Lease kube-system/kube-scheduler is held by ",
		"(lease duration 15s) (and 1 more). Two schedulers serving one name race for the same pods",
		"stop kube-scheduler first (docs/scheduler.md) or give nodeshepherd's scheduler a name of its own (--scheduler-name, not default-scheduler), or pass --allow-conflicting-writers=scheduler to run it anyway",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	conflictEvent(t, client, companion.KubeScheduler, "nodeshepherd's scheduler controller not started: kube-scheduler holds this Lease (held by ")
	conflictEvent(t, client, "pending", "nodeshepherd's scheduler controller not started: kube-scheduler last wrote condition PodScheduled=False (Unschedulable) here")
	if got := gaugeValue(t, reg, "nodeshepherd_conflicting_writer", map[string]string{"controller": scheduler.Name, "writer": companion.KubeScheduler}); got != 1 {
		t.Errorf("nodeshepherd_conflicting_writer{controller=scheduler,writer=kube-scheduler} = %v, want 1", got)
	}

	// `nodeshepherd run` exits 1 with the error.
	cmd := framework.StartBinary(t, "run", "--kubeconfig="+cp.KubeconfigPath(), "--controllers=scheduler", "--scheduler-name=default-scheduler",
		"--leader-elect=false")
	code := waitExit(t, cmd, 2*time.Minute)
	if log := logOf(cmd); code != 1 || !strings.Contains(log, "refusing to run controller scheduler: kube-scheduler schedules the pods of default-scheduler too") {
		t.Errorf("nodeshepherd run: exit %d, want 1 with the refusal; log:\n%s", code, log)
	}

	// (b) Under a name of its own it runs: kube-scheduler's Lease says
	// nothing of that name, and nothing it wrote is of that name.
	framework.StartNodeShepherd(t, cfg, schedulerNamed(scheduler.DefaultSchedulerName), func(o *manager.Options) { o.Controllers = []string{scheduler.Name} }).Stop()

	// (c) Allowed: it runs, and says what it found.
	cmd = framework.StartBinary(t, "run", "--kubeconfig="+cp.KubeconfigPath(), "--controllers=scheduler", "--scheduler-name=default-scheduler",
		"--leader-elect=false", "--allow-conflicting-writers=scheduler", "--metrics-bind-address=127.0.0.1:0")
	framework.Eventually(t, 2*time.Minute, "scheduler allowed next to kube-scheduler, running", func(context.Context) (bool, string, error) {
		log := logOf(cmd)
		if cmd.ProcessState != nil || !alive(cmd.Process.Pid) {
			t.Fatalf("nodeshepherd run --allow-conflicting-writers=scheduler exited:\n%s", log)
		}
		return strings.Contains(log, "Another writer writes what this controller owns; running it anyway") &&
			strings.Contains(log, `evidence="its leader Lease kube-system/kube-scheduler is held by `) &&
			strings.Contains(log, "Controllers running"), "", nil
	})
	_ = cmd.Process.Kill()

	// Stopped as docs/scheduler.md says: once its Lease expired, what
	// kube-scheduler wrote is history and default-scheduler is nodeshepherd's.
	if err := syscall.Kill(cp.PID(controlplane.Scheduler), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kubeSchedulerLeaseLive(t, client, false)
	framework.StartNodeShepherd(t, cfg, schedulerNamed(v1.DefaultSchedulerName), func(o *manager.Options) { o.Controllers = []string{scheduler.Name} })
}

// TestCompanionSchedulerStoppedByKubeSchedulerWrites: kube-scheduler without
// leader election has no Lease to read; nodeshepherd's scheduler starts as
// default-scheduler, and a pod kube-scheduler reports unschedulable while it
// runs stops it. (A pod both find unschedulable for the same reason, with
// the same message, would not: the second finds the condition written and
// writes nothing, docs/companion.md.)
func TestCompanionSchedulerStoppedByKubeSchedulerWrites(t *testing.T) {
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true, Scheduler: true}) // --leader-elect=false
	cfg, client := cp.RESTConfig(), framework.Client(t, cp)
	ctx, cancel := context.WithCancel(framework.Context(t))
	defer cancel()
	done, addr := make(chan error, 1), make(chan string, 1)
	ctrl := schedulerNamed(v1.DefaultSchedulerName)
	go func() {
		done <- manager.Run(ctx, cfg, manager.Options{Controllers: []string{scheduler.Name}, Constructors: controllers.Constructors(ctrl),
			MetricsBindAddress: "127.0.0.1:0", OnServing: func(a string) { addr <- a }})
	}()
	ns := &framework.NodeShepherd{}
	select {
	case ns.Addr = <-addr:
	case err := <-done:
		t.Fatalf("nodeshepherd stopped before serving: %v", err)
	}
	// Ready once the start check has passed and the informers synced.
	framework.Eventually(t, time.Minute, "nodeshepherd's scheduler running", func(ctx context.Context) (bool, string, error) {
		select {
		case err := <-done:
			t.Fatalf("nodeshepherd's scheduler refused next to a kube-scheduler without a Lease, before it wrote anything: %v", err)
		default:
		}
		resp, err := ns.Get(ctx, "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	createUnschedulable(t, client, "contested", v1.DefaultSchedulerName, true)
	select {
	case err := <-done:
		for _, want := range []string{"stopped controller scheduler: kube-scheduler schedules the pods of default-scheduler too: pod default/contested: condition PodScheduled=False",
			"kube-scheduler runs: it wrote this while nodeshepherd's scheduler controller ran", "--allow-conflicting-writers=scheduler"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v lacks %q", err, want)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("nodeshepherd's scheduler still runs 1m after kube-scheduler reported a pod of default-scheduler unschedulable")
	}
	conflictEvent(t, client, "contested", "nodeshepherd's scheduler controller stopped: kube-scheduler last wrote condition PodScheduled=False")
}

// TestCompanionSchedulerWithoutKubeScheduler: a fresh control plane without
// kube-scheduler: nodeshepherd's scheduler runs as default-scheduler.
func TestCompanionSchedulerWithoutKubeScheduler(t *testing.T) {
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true})
	framework.StartNodeShepherd(t, cp.RESTConfig(), schedulerNamed(v1.DefaultSchedulerName), func(o *manager.Options) { o.Controllers = []string{scheduler.Name} })
}

// waitExit waits for a process started by framework.StartBinary to exit and
// returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err)
	case <-time.After(within):
		t.Fatalf("%v still runs after %v:\n%s", cmd.Args, within, logOf(cmd))
		return 0
	}
}

// gaugeValue reads a gauge of the manager's registry.
func gaugeValue(t *testing.T, reg prometheus.Registerer, name string, labels map[string]string) float64 {
	t.Helper()
	g, ok := reg.(prometheus.Gatherer)
	if !ok {
		t.Fatalf("the manager's registry %T cannot be gathered", reg)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
