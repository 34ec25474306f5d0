package controllerutil

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// MaxRetryDelay bounds how long a key whose syncs keep failing waits
// before its next try. client-go's default controller limiter doubles the
// wait up to 1000 s, so an outage of a minute (a cloud provider answering
// errors; chaos seed 160030: a repair at its Fence step, the provider blind
// for 50 s) left the key untried for up to 17 minutes after the outage
// ended, the repair with it. A repair ladder, a drain or a countdown must
// look again soon after the cause goes: never later than one write's
// timeout.
const MaxRetryDelay = kube.WriteTimeout

// RetryLimiter is every controller's work-queue limiter: client-go's
// default (per key, 5 ms doubling on each failure; overall, 10 retries a
// second with a burst of 100) with the per-key wait capped at
// MaxRetryDelay.
func RetryLimiter[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](5*time.Millisecond, MaxRetryDelay),
		&workqueue.TypedBucketRateLimiter[T]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
