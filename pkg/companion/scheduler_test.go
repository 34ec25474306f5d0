package companion

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// now is the fake clock's time in mctx.
var now = t0.Add(time.Hour)

const own = "nodeshepherd"

func schedulerLease(age time.Duration, holder string) *coordinationv1.Lease {
	return lease(KubeScheduler, now.Add(-age), holder)
}

// What kube-scheduler v1.37 leaves on a pod it found unschedulable (read
// back from the local control plane, docs/companion.md): its status entry
// holds the condition's reason, message and observedGeneration (status too
// when it created the condition). A binding leaves no entry.
const schedulerStatusFields = `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"PodScheduled\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}}}}`

func scheduledPod(name, schedulerName, writer string, status v1.ConditionStatus, reason string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ManagedFields: []metav1.ManagedFieldsEntry{
		entry("kubectl-create", "", `{"f:spec":{"f:schedulerName":{}}}`)}},
		Spec:   v1.PodSpec{SchedulerName: schedulerName},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: status, Reason: reason}}}}
	if writer != "" {
		p.ManagedFields = append(p.ManagedFields, entry(writer, "status", schedulerStatusFields))
	}
	return p
}

func TestSchedulerClaims(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  *v1.Pod
		want string // the evidence's writer; "" none
	}{
		{"unschedulable, by kube-scheduler", scheduledPod("p", "x", KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable), KubeScheduler},
		{"unschedulable, by another scheduler", scheduledPod("p", "x", "my-scheduler", v1.ConditionFalse, v1.PodReasonUnschedulable), "my-scheduler"},
		{"unschedulable, by nodeshepherd", scheduledPod("p", "x", own, v1.ConditionFalse, v1.PodReasonUnschedulable), ""},
		{"bound after kube-scheduler found it unschedulable", scheduledPod("p", "x", KubeScheduler, v1.ConditionTrue, ""), KubeScheduler},
		// The kubelet reports PodScheduled=True of pods created bound.
		{"bound, condition by the kubelet", scheduledPod("p", "x", "kubelet", v1.ConditionTrue, ""), ""},
		// The API server sets SchedulingGated at creation; nobody's.
		{"gated", scheduledPod("p", "x", KubeScheduler, v1.ConditionFalse, v1.PodReasonSchedulingGated), ""},
		{"another scheduler name", scheduledPod("p", "y", KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable), ""},
		{"no writer", scheduledPod("p", "x", "", v1.ConditionFalse, v1.PodReasonUnschedulable), ""},
	} {
		got := check("scheduler", own, Scheduler("x"), c.pod)
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s: evidence %v, want none", c.name, got)
		case c.want != "" && (len(got) != 1 || got[0].Writer != c.want):
			t.Errorf("%s: evidence %v, want one by %s", c.name, got, c.want)
		}
	}
	got := check("scheduler", own, Scheduler("x"), scheduledPod("p", "x", KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable))
	if s := got[0].String(); s != `pod ns/p: condition PodScheduled=False (Unschedulable) (status.conditions[{"type":"PodScheduled"}]) last written by kube-scheduler at 2026-11-24T12:00:00Z` {
		t.Errorf("evidence reads %q", s)
	}
	// Only default-scheduler is known to be kube-scheduler's from its Lease.
	leases := func(name string) (n int) {
		for _, c := range Scheduler(name) {
			if c.Lease != "" {
				n++
			}
		}
		return n
	}
	if leases(v1.DefaultSchedulerName) != 1 || leases("nodeshepherd-scheduler") != 0 {
		t.Errorf("Lease claims: default-scheduler %d, nodeshepherd-scheduler %d; want 1 and 0", leases(v1.DefaultSchedulerName), leases("nodeshepherd-scheduler"))
	}
}

func TestLeaseIsNeverStaleSoonerThanItsDuration(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		age  time.Duration
		live bool
	}{{-2 * time.Second, true}, {0, true}, {15 * time.Second, true}, {16 * time.Second, true}, {16*time.Second + time.Millisecond, false}, {time.Hour, false}} {
		s := readLease(ctx, fake.NewClientset(schedulerLease(c.age, "ks-1")), KubeScheduler, now)
		if s.live() != c.live {
			t.Errorf("renewed %v ago, lease duration 15s: live %v, want %v (%s)", c.age, s.live(), c.live, s.why())
		}
	}
	if s := readLease(ctx, fake.NewClientset(schedulerLease(0, "")), KubeScheduler, now); s.live() || !strings.Contains(s.why(), "released") {
		t.Errorf("released Lease: live %v (%s)", s.live(), s.why())
	}
	if s := readLease(ctx, fake.NewClientset(), KubeScheduler, now); s.live() || s.why() != "no leader Lease kube-system/kube-scheduler is visible" {
		t.Errorf("no Lease: live %v (%s)", s.live(), s.why())
	}
}

func schedulerGuard(name string) Guarded {
	return Guarded{Name: "scheduler", Claims: Scheduler(name), Own: own}
}

func build(manager.Context) (manager.Controller, error) { return idle{make(chan struct{})}, nil }

func TestSchedulerRefusedNextToKubeScheduler(t *testing.T) {
	// A fresh cluster: kube-scheduler's Lease, no pod.
	client := fake.NewClientset(schedulerLease(2*time.Second, "cp-1_ab12"))
	ctx := mctx(client, record.NewFakeRecorder(10), false)
	_, err := Guard(schedulerGuard(v1.DefaultSchedulerName), build)(ctx)
	for _, want := range []string{
		"refusing to run controller scheduler: kube-scheduler schedules the pods of default-scheduler too: its leader Lease kube-system/kube-scheduler is held by cp-1_ab12, renewed 2s ago (lease duration 15s).",
		"Two schedulers serving one name race for the same pods",
		"stop kube-scheduler first (docs/scheduler.md) or give nodeshepherd's scheduler a name of its own (--scheduler-name, not default-scheduler), or pass --allow-conflicting-writers=scheduler to run it anyway",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	evs, _ := client.CoreV1().Events(LeaseNamespace).List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].InvolvedObject.Kind != "Lease" || evs.Items[0].Reason != EventConflictingWriter ||
		!strings.HasPrefix(evs.Items[0].Message, "nodeshepherd's scheduler controller not started: kube-scheduler holds this Lease (held by cp-1_ab12") {
		t.Errorf("events in kube-system: %+v", evs.Items)
	}
	var m dto.Metric
	if err := conflictMetric(ctx.Registry).WithLabelValues("scheduler", KubeScheduler).Write(&m); err != nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("nodeshepherd_conflicting_writer = %v (%v), want 1", m.GetGauge().GetValue(), err)
	}

	runs := func(what string, g Guarded, dryRun bool, objs ...runtime.Object) {
		t.Helper()
		if _, err := Guard(g, build)(mctx(fake.NewClientset(objs...), record.NewFakeRecorder(10), dryRun)); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	allowed := schedulerGuard(v1.DefaultSchedulerName)
	allowed.Allowed = true
	runs("--allow-conflicting-writers=scheduler", allowed, false, schedulerLease(0, "cp-1"))
	runs("--dry-run", schedulerGuard(v1.DefaultSchedulerName), true, schedulerLease(0, "cp-1"))
	runs("kube-scheduler stopped: its Lease not renewed for longer than its duration", schedulerGuard(v1.DefaultSchedulerName), false,
		schedulerLease(17*time.Second, "cp-1"), scheduledPod("p", v1.DefaultSchedulerName, KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable))
	runs("no kube-scheduler Lease, what it wrote is history", schedulerGuard(v1.DefaultSchedulerName), false,
		scheduledPod("p", v1.DefaultSchedulerName, KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable))
	// Which names kube-scheduler serves but default-scheduler, its Lease does not say.
	runs("a name of its own", schedulerGuard("nodeshepherd-scheduler"), false, schedulerLease(0, "cp-1"),
		scheduledPod("p", v1.DefaultSchedulerName, KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable))

	// ... its writes do: a kube-scheduler profile of the same name.
	_, err = Guard(schedulerGuard("nodeshepherd-scheduler"), build)(mctx(fake.NewClientset(schedulerLease(time.Second, "cp-1"),
		scheduledPod("p", "nodeshepherd-scheduler", KubeScheduler, v1.ConditionFalse, v1.PodReasonUnschedulable)), nil, false))
	for _, want := range []string{"kube-scheduler schedules the pods of nodeshepherd-scheduler too: pod ns/p: condition PodScheduled=False (Unschedulable)",
		"last written by kube-scheduler at 2026-11-24T12:00:00Z; kube-scheduler runs: its leader Lease kube-system/kube-scheduler is held by cp-1, renewed 1s ago",
		"(--scheduler-name, not nodeshepherd-scheduler)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// runGuarded starts the guarded controller with its informers and returns
// its result channel once the controller runs.
func runGuarded(t *testing.T, ctx manager.Context, g Guarded) (<-chan error, context.CancelFunc) {
	t.Helper()
	inner := idle{make(chan struct{})}
	c, err := Guard(g, func(manager.Context) (manager.Controller, error) { return inner, nil })(ctx)
	if err != nil {
		t.Fatalf("refused at start: %v", err)
	}
	run, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctx.Informers.Start(run.Done())
	ctx.Informers.WaitForCacheSync(run.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	<-inner.ran
	return done, cancel
}

func stoppedWith(t *testing.T, done <-chan error, want ...string) {
	t.Helper()
	select {
	case err := <-done:
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("error %v lacks %q", err, w)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduler still runs 30s after the other scheduler showed")
	}
}

// kube-scheduler started next to the running scheduler: its Lease, read
// every leaseRecheck, stops it.
func TestSchedulerStoppedWhenKubeSchedulerStarts(t *testing.T) {
	client := fake.NewClientset()
	ctx := mctx(client, nil, false)
	clock := ctx.Clock.(*clocktesting.FakeClock)
	done, _ := runGuarded(t, ctx, schedulerGuard(v1.DefaultSchedulerName))
	if _, err := client.CoordinationV1().Leases(LeaseNamespace).Create(context.Background(), schedulerLease(0, "cp-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !clock.HasWaiters() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the guard's ticker, made in Run
	}
	clock.Step(leaseRecheck)
	stoppedWith(t, done, "stopped controller scheduler: kube-scheduler schedules the pods of default-scheduler too: its leader Lease kube-system/kube-scheduler is held by cp-2")
}

// A scheduler without a Lease to read (no leader election) shows in the
// writes it is seen making: what it wrote before the start does not count,
// what it writes while nodeshepherd's scheduler runs does.
func TestSchedulerStoppedByAWriteSeenBeingMade(t *testing.T) {
	old := scheduledPod("old", v1.DefaultSchedulerName, "my-scheduler", v1.ConditionFalse, v1.PodReasonUnschedulable)
	pending := scheduledPod("p", v1.DefaultSchedulerName, "", v1.ConditionFalse, v1.PodReasonUnschedulable)
	client := fake.NewClientset(old, pending)
	ctx := mctx(client, nil, false)
	done, _ := runGuarded(t, ctx, schedulerGuard(v1.DefaultSchedulerName))
	// Its own writes are no evidence.
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions[0].Message = "0/3 nodes are available"
	if p, err = client.CoreV1().Pods("ns").UpdateStatus(context.Background(), p, metav1.UpdateOptions{FieldManager: own}); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions[0].Message = "0/3 nodes are available: 3 Insufficient cpu."
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(context.Background(), p, metav1.UpdateOptions{FieldManager: "my-scheduler"}); err != nil {
		t.Fatal(err)
	}
	// Stopped by that write alone: the error names the first evidence,
	// which the pod "old" or the own write would have been.
	stoppedWith(t, done, "stopped controller scheduler: my-scheduler schedules the pods of default-scheduler too: pod ns/p: condition PodScheduled=False (Unschedulable)",
		"my-scheduler runs: it wrote this while nodeshepherd's scheduler controller ran")
}
