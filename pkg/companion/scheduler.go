package companion

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Scheduler is what a scheduler serving name shares with any other that
// serves it: the pods whose spec.schedulerName is name. Two schedulers of
// one name race for them: both bind, and each preempts for pods the other
// then places elsewhere. What shows another one:
//
//   - for default-scheduler, kube-scheduler's leader Lease
//     kube-system/kube-scheduler, held and renewed within its duration, on
//     its own (a fresh cluster has no pod yet): kube-scheduler always serves
//     default-scheduler. Which other names it serves (its profiles), the
//     Lease does not tell;
//   - a PodScheduled condition of such a pod written by kube-scheduler, or a
//     PodScheduled=False one by any field manager but nodeshepherd's
//     (another scheduler reporting the pod unschedulable; the
//     SchedulingGated condition the API server sets is nobody's). A binding
//     (pods/binding) leaves no trace in managedFields, on kube-scheduler
//     v1.37: the pods another scheduler placed at once show nothing.
//
// The writes count while their writer's leader Lease is held and renewed
// within its duration, or when seen being made while the scheduler runs:
// pending pods keep what a stopped kube-scheduler wrote, and a scheduler
// without leader election has no Lease to tell.
func Scheduler(name string) []Claim {
	const (
		does = "schedules the pods of %s too"
		why  = "Two schedulers serving one name race for the same pods: both bind them, and each preempts for pods the other places elsewhere"
	)
	advice := func(writer string) string {
		return fmt.Sprintf("stop %s first (docs/scheduler.md) or give nodeshepherd's scheduler a name of its own (--scheduler-name, not %s)", writer, name)
	}
	ours := func(p *v1.Pod, status bool) map[string]Path {
		if p.Spec.SchedulerName != name {
			return nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type != v1.PodScheduled || c.Reason == v1.PodReasonSchedulingGated || (!status && c.Status != v1.ConditionFalse) {
				continue
			}
			what := "condition PodScheduled=" + string(c.Status)
			if c.Reason != "" {
				what += " (" + c.Reason + ")"
			}
			return map[string]Path{what: {"f:status", "f:conditions", `k:{"type":"PodScheduled"}`}}
		}
		return nil
	}
	claims := []Claim{
		{Writer: KubeScheduler, Pod: func(p *v1.Pod) map[string]Path { return ours(p, true) }, LiveLease: true},
		{Pod: func(p *v1.Pod) map[string]Path { return ours(p, false) }, LiveLease: true},
	}
	if name == v1.DefaultSchedulerName {
		claims = append(claims, Claim{Writer: KubeScheduler, Lease: KubeScheduler})
	}
	for i := range claims {
		claims[i].Does, claims[i].Why, claims[i].Advice = fmt.Sprintf(does, name), why, advice
	}
	return claims
}

// leasePrecision is how much later than its duration a Lease is taken as
// stale: a holder renews it on its own clock, which may be behind ours, and
// a renewal written with whole seconds (metav1.Time, a MicroTime that went
// through one) may read up to a second older than it is.
const leasePrecision = time.Second

// leaseState is a leader Lease as read at a time.
type leaseState struct {
	name   string
	lease  *coordinationv1.Lease // nil: not found, or err
	err    error
	holder string
	age    time.Duration // since the last renewal
	dur    time.Duration
}

func readLease(ctx context.Context, client kubernetes.Interface, name string, now time.Time) leaseState {
	s := leaseState{name: name}
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			s.err = err
		}
		return s
	}
	s.lease = l
	if l.Spec.HolderIdentity != nil {
		s.holder = *l.Spec.HolderIdentity
	}
	s.dur = 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		s.dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if l.Spec.RenewTime != nil {
		s.age = now.Sub(l.Spec.RenewTime.Time)
	} else if l.Spec.AcquireTime != nil {
		s.age = now.Sub(l.Spec.AcquireTime.Time)
	} else {
		s.age = time.Duration(1<<63 - 1)
	}
	return s
}

// live says whether the Lease is held and was renewed within its
// duration: never stale sooner than that.
func (s leaseState) live() bool {
	return s.lease != nil && s.holder != "" && s.age <= s.dur+leasePrecision
}

// forbidden says whether this identity may not read the Lease.
func (s leaseState) forbidden() bool { return apierrors.IsForbidden(s.err) }

// held describes a live Lease: "held by X, renewed 2s ago (lease duration 15s)".
func (s leaseState) held() string {
	return fmt.Sprintf("held by %s, renewed %v ago (lease duration %v)", s.holder, max(s.age, 0).Round(time.Second), s.dur)
}

// why describes the Lease as the writer's liveness.
func (s leaseState) why() string {
	ref := LeaseNamespace + "/" + s.name
	switch {
	case s.err != nil:
		return fmt.Sprintf("its leader Lease %s cannot be read (%v)", ref, s.err)
	case s.lease == nil:
		return "no leader Lease " + ref + " is visible"
	case s.live():
		return "its leader Lease " + ref + " is " + s.held()
	case s.holder == "":
		return "its leader Lease " + ref + " is released"
	default:
		return fmt.Sprintf("its leader Lease %s was last renewed %v ago, longer than its duration (%v)", ref, s.age.Round(time.Second), s.dur)
	}
}
