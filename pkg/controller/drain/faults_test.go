package drain

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
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
