// Package clientmetrics exports what client-go measures about nodeshepherd's
// requests to the API server under kube-controller-manager's names:
// rest_client_requests_total{code,method,host} (every attempt by its
// answer, "<error>" for one that got none), rest_client_request_retries_total
// {code,verb,host} (the attempts client-go made again by itself after a 429
// or 5xx answer that carried Retry-After, by the retry's own answer)
// rest_client_request_duration_seconds{verb,host} and
// rest_client_rate_limiter_duration_seconds{verb,host} (each request's wait on
// the client's own QPS/burst limiter: a wait is client-side throttling). A
// throttled or failing API path shows there before it shows anywhere else.
package clientmetrics

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
		Help: "Number of HTTP requests to the API server (every attempt), partitioned by status code, method, and host."}, []string{"code", "method", "host"})
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_request_retries_total",
		Help: "Number of request retries made by client-go after a 429 or 5xx answer with Retry-After, partitioned by the retry's status code, verb, and host."}, []string{"code", "verb", "host"})
	latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds, broken down by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"})
	rateLimiter = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
		Help:    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"})
)

// client-go takes its adapters through unsynchronised package variables: they
// are set when this package is loaded, before any request can read them
// (kube-controller-manager's component-base does the same in an init).
func init() {
	metrics.Register(metrics.RegisterOpts{RequestResult: resultAdapter{}, RequestRetry: retryAdapter{}, RequestLatency: latencyAdapter{},
		RateLimiterLatency: rateLimiterAdapter{}})
}

type resultAdapter struct{}

func (resultAdapter) Increment(_ context.Context, code, method, host string) {
	requests.WithLabelValues(code, method, host).Inc()
}

type retryAdapter struct{}

func (retryAdapter) IncrementRetry(_ context.Context, code, verb, host string) {
	retries.WithLabelValues(code, verb, host).Inc()
}

type latencyAdapter struct{}

func (latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	latency.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type rateLimiterAdapter struct{}

func (rateLimiterAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	rateLimiter.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

// Register adds the counters, which count every request of this process
// (they are fed from the moment the package is loaded), to reg. A registry
// that has them already is left as it is, so every run of the manager in one
// process (the tests run several) can call it.
func Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{requests, retries, latency, rateLimiter} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
