package clientmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRequestsCountedByCode: every attempt shows in rest_client_requests_total
// by its answer's code (the 500, the 429 with Retry-After and the 200 of
// client-go's retry after it), and the retry in
// rest_client_request_retries_total, by its own answer.
func TestRequestsCountedByCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg); err != nil { // a second manager run in the same process
		t.Fatalf("registering twice: %v", err)
	}
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/broken"):
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`))
		case calls == 2: // the first request to /throttled
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":429}`))
		default:
			_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"throttled"}}`))
		}
	}))
	defer srv.Close()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
	if _, err := client.CoreV1().Nodes().Get(context.Background(), "broken", metav1.GetOptions{}); err == nil {
		t.Fatal("want the 500")
	}
	if _, err := client.CoreV1().Nodes().Get(context.Background(), "throttled", metav1.GetOptions{}); err != nil {
		t.Fatalf("client-go retries a 429 with Retry-After: %v", err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		vec    *prometheus.CounterVec
		labels []string
		want   float64
	}{
		{requests, []string{"500", "GET", host}, 1},
		{requests, []string{"429", "GET", host}, 1}, // every attempt counts
		{requests, []string{"200", "GET", host}, 1},
		{retries, []string{"200", "GET", host}, 1}, // the retry, by its own answer
	} {
		var m dto.Metric
		if err := c.vec.WithLabelValues(c.labels...).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != c.want {
			t.Errorf("%v: got %v, want %v", c.labels, got, c.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, n := range []string{"rest_client_requests_total", "rest_client_request_retries_total", "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds"} {
		if !names[n] {
			t.Errorf("%s not gathered from the registry (got %v)", n, names)
		}
	}
}

// TestRateLimiterWaitsObserved: every request's wait on the client's own
// QPS/burst limiter is observed, so client-side throttling shows as waits
// above zero (here QPS 1, burst 1: the second request waits about 1 s).
func TestRateLimiterWaitsObserved(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`))
	}))
	defer srv.Close()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL, QPS: 1, Burst: 1})
	for range 2 {
		if _, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var m dto.Metric
	h, err := rateLimiter.GetMetricWithLabelValues("GET", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 2 {
		t.Errorf("waits observed: %d, want 2", got)
	}
	// The second waited for the limiter's next token; no wait is longer
	// than the limiter's period.
	if sum := m.GetHistogram().GetSampleSum(); sum < 0.5 || sum > 5 {
		t.Errorf("waited %.2fs in all, want about 1s", sum)
	}
}
