package drain

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A 429 is a PodDisruptionBudget's refusal only when it names the budget as
// its cause. The API server's throttling (API Priority and Fairness) answers
// 429 too: such an eviction is an error retried with backoff, not "blocked by
// a PodDisruptionBudget" — no blocked-by-pdb count, no blocked-since mark on
// the node, so force-after's countdown never starts from throttling.
func TestHandler429FromThrottlingIsNotABudgetRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    func() error
		budget bool
	}{
		{"throttled by the API server", func() error {
			return apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
		}, false},
		{"refused by a PodDisruptionBudget", func() error {
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes,
				metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 1 healthy pods and has 1 currently"})
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, handlerConfig(), drainNode("n", true, draining), podOn("n", "web"))
			refusals := 0
			h.client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" || refusals == 2 {
					return false, nil, nil
				}
				refusals++
				return true, nil, tc.err()
			})
			h.sync("n")
			h.until("DrainSucceeded", func() bool { return h.event(EventDrainSucceeded) != "" })
			m := h.c.metrics
			byBudget, errs := counter(t, m.evictions.WithLabelValues("blocked-by-pdb")), counter(t, m.evictions.WithLabelValues("error"))
			_, marked := h.node("n").Annotations[AnnotationBlockedSince]
			if tc.budget {
				if byBudget != 2 || errs != 0 || counter(t, m.blockedByPDB) != 2 || !marked {
					t.Errorf("budget refusals: blocked-by-pdb %v, error %v, blocked since marked %v; want 2, 0, true", byBudget, errs, marked)
				}
				return
			}
			if byBudget != 0 || errs != 2 || counter(t, m.blockedByPDB) != 0 || marked {
				t.Errorf("throttling: blocked-by-pdb %v, error %v, blocked since marked %v; want 0, 2, false", byBudget, errs, marked)
			}
			if got := h.evicted(); len(got) != 3 {
				t.Errorf("eviction requests %q, want 3 (two refused, one accepted)", got)
			}
		})
	}
}

// An eviction that takes effect but whose answer is lost (a timeout) is
// not sent again, and the drain counts the pod as evicted in its
// DrainSucceeded event: the pod went because of it.
func TestHandlerEvictionWhoseAnswerWasLost(t *testing.T) {
	h := newHandler(t, handlerConfig(), drainNode("n", true, draining), podOn("n", "web"), podOn("n", "api"))
	var lost atomic.Bool
	h.client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ev, ok := a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction)
		if a.GetSubresource() != "eviction" || !ok || ev.Name != "web" || lost.Load() {
			return false, nil, nil
		}
		lost.Store(true)
		// The API server evicts the pod; the answer never comes back.
		if err := h.client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewTimeoutError("request timed out", 0)
	})
	h.sync("n")
	// The informer sees the pod go (in a cluster, milliseconds after the
	// eviction) before the fake clock lets the drain look again.
	deadline := time.Now().Add(time.Minute)
	for {
		_, present, _ := h.c.pods.GetByKey("ns/web")
		if lost.Load() && !present {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lost eviction was not sent, or the informer never saw the pod go")
		}
		time.Sleep(time.Millisecond)
	}
	h.until("DrainSucceeded", func() bool { return h.event(EventDrainSucceeded) != "" })
	if got := h.evicted(); len(got) != 2 {
		t.Errorf("eviction requests %q, want one per pod", got)
	}
	if e := h.event(EventDrainSucceeded); !strings.Contains(e, "evicted 2 pods") {
		t.Errorf("DrainSucceeded = %q, want both pods counted as evicted", e)
	}
	if n := counter(t, h.c.metrics.evictions.WithLabelValues("error")); n != 1 {
		t.Errorf("nodeshepherd_drain_evictions_total{error} = %v, want 1 (the request that timed out)", n)
	}
}
