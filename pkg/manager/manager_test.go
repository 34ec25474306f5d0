package manager

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// These tests check how Run passes errors and orders shutdown against the
// Lease; they use a fake clientset because only the Lease lock is involved
// (the failover behaviour against a real API server is in test/integration).

type ctrlFunc func(ctx context.Context) error

func (f ctrlFunc) Run(ctx context.Context) error { return f(ctx) }

func testOptions(run ctrlFunc) Options {
	return Options{
		Controllers:  []string{"test"},
		Constructors: map[string]Constructor{"test": func(Context) (Controller, error) { return run, nil }},
		LeaderElection: LeaderElection{Enabled: true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
			RetryPeriod: 100 * time.Millisecond, ResourceName: "nodeshepherd", ResourceNamespace: "kube-system"},
		MetricsBindAddress: "0",
		Identity:           "me",
		StopTimeout:        5 * time.Second,
	}
}

func holder(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(t.Context(), "nodeshepherd", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// runAsync starts run and returns its result channel.
func runAsync(ctx context.Context, client *fake.Clientset, opts Options) <-chan error {
	done := make(chan error, 1)
	go func() { done <- run(ctx, client, nil, opts) }()
	return done
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute): // a busy machine under -race
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestControllerErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	for _, le := range []bool{false, true} {
		client := fake.NewClientset()
		opts := testOptions(func(context.Context) error { return boom })
		opts.LeaderElection.Enabled = le
		err := wait(t, runAsync(t.Context(), client, opts), "Run to return")
		if !errors.Is(err, boom) {
			t.Errorf("leader election %v: Run returned %v, want the controller's error", le, err)
		}
		if le {
			if h := holder(t, client); h != "" {
				t.Errorf("lease held by %q after Run returned, want released", h)
			}
		}
	}
}

func TestShutdownStopsControllersBeforeReleasingLease(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	heldAtStop := make(chan string, 1)
	opts := testOptions(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		heldAtStop <- holder(t, client)
		// An in-flight write finishes after shutdown began.
		_, err := client.CoreV1().ConfigMaps("default").Create(context.WithoutCancel(ctx),
			&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "in-flight"}}, metav1.CreateOptions{})
		return err
	})
	done := runAsync(ctx, client, opts)
	wait(t, started, "the controller to start")
	cancel()
	if err := wait(t, done, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if h := <-heldAtStop; h != "me" {
		t.Errorf("lease held by %q while the controller was stopping, want still held by us", h)
	}
	if h := holder(t, client); h != "" {
		t.Errorf("lease held by %q after Run returned, want released", h)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(t.Context(), "in-flight", metav1.GetOptions{}); err != nil {
		t.Errorf("the in-flight write: %v", err)
	}
}

func TestStuckControllerKeepsLease(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started, unstick := make(chan struct{}), make(chan struct{})
	defer close(unstick)
	opts := testOptions(func(context.Context) error {
		close(started)
		<-unstick // ignores its context
		return nil
	})
	opts.StopTimeout = 200 * time.Millisecond
	done := runAsync(ctx, client, opts)
	wait(t, started, "the controller to start")
	cancel()
	err := wait(t, done, "Run to return")
	if err == nil || !strings.Contains(err.Error(), "did not stop within 200ms of shutdown: test") {
		t.Fatalf("Run returned %v, want a stop timeout", err)
	}
	if h := holder(t, client); h != "me" {
		t.Errorf("lease held by %q after a controller failed to stop, want still ours (left to expire)", h)
	}
}

func TestLostLeaseStopsControllersAndFails(t *testing.T) {
	client := fake.NewClientset()
	var failRenewals atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failRenewals.Load() {
			return true, nil, errors.New("API server unreachable")
		}
		return false, nil, nil
	})
	started, stopped := make(chan struct{}), make(chan struct{})
	opts := testOptions(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil
	})
	done := runAsync(t.Context(), client, opts)
	wait(t, started, "the controller to start")
	failRenewals.Store(true)
	err := wait(t, done, "Run to return")
	if err == nil || !strings.Contains(err.Error(), "lost leadership") {
		t.Fatalf("Run returned %v, want lost leadership", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("Run returned before the controller stopped")
	}
}

// twoControllers runs "broken" next to "healthy"; healthy records that its
// context ended, broken does what the test says.
func twoControllers(broken Controller, healthyStopped chan struct{}) Options {
	opts := testOptions(nil)
	opts.Controllers = []string{"healthy", "broken"}
	opts.Constructors = map[string]Constructor{
		"healthy": func(Context) (Controller, error) {
			return ctrlFunc(func(ctx context.Context) error { <-ctx.Done(); close(healthyStopped); return nil }), nil
		},
		"broken": func(Context) (Controller, error) { return broken, nil },
	}
	return opts
}

// A leader whose controller fails (returns, panics, or reports that its loop
// stopped) stops every controller, fails /healthz, releases the Lease and
// returns an error naming the controller: a standby then takes over.
func TestBrokenLeaderLetsGo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken Controller
		want   string
	}{
		{"returns early", ctrlFunc(func(context.Context) error { return nil }), "controller broken stopped on its own"},
		{"returns an error", ctrlFunc(func(context.Context) error { return errors.New("rules file unreadable") }), "rules file unreadable"},
		{"panics", ctrlFunc(func(context.Context) error { panic("bug") }), "controller broken panicked: bug"},
		{"stops making progress", unhealthy{}, "controller broken is not working: loop stuck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			stopped := make(chan struct{})
			m := &manager{}
			opts := twoControllers(tc.broken, stopped)
			done := make(chan error, 1)
			go func() { done <- runWith(t.Context(), client, opts, m) }()
			err := wait(t, done, "Run to return")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run returned %v, want %q", err, tc.want)
			}
			wait(t, stopped, "the healthy controller to be stopped")
			if h := holder(t, client); h != "" {
				t.Errorf("lease held by %q after the leader broke, want released", h)
			}
			if f := m.failed(); f == nil || !strings.Contains(f.Error(), tc.want) {
				t.Errorf("/healthz failure %v, want %q", f, tc.want)
			}
		})
	}
}

type unhealthy struct{}

func (unhealthy) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (unhealthy) Healthy(time.Time) error       { return errors.New("loop stuck") }

// Caches that never sync (here: pods cannot be listed) end the leadership
// after StartTimeout with an error naming the informer.
func TestCachesThatNeverSyncLetGo(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("pods is forbidden")
	})
	opts := testOptions(nil)
	opts.StartTimeout = 500 * time.Millisecond
	opts.Constructors = map[string]Constructor{"test": func(c Context) (Controller, error) {
		c.Informers.Core().V1().Pods().Informer()
		return ctrlFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }), nil
	}}
	err := wait(t, runAsync(t.Context(), client, opts), "Run to return")
	if err == nil || !strings.Contains(err.Error(), "caches did not sync within 500ms") || !strings.Contains(err.Error(), "Pod") {
		t.Fatalf("Run returned %v, want a cache sync timeout naming pods", err)
	}
	if h := holder(t, client); h != "" {
		t.Errorf("lease held by %q, want released", h)
	}
}

// readyz answers /readyz of m.
func readyz(m *manager) (int, string) {
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// /readyz goes 503 -> 200 once: with leader election a standby is ready and
// stays ready while it takes over (here its controllers are still being
// built when it leads); without, it is ready once its controllers start.
func TestReadyzDoesNotFlapOnTakeover(t *testing.T) {
	for _, le := range []bool{true, false} {
		client := fake.NewClientset()
		building, release, running := make(chan struct{}), make(chan struct{}), make(chan struct{})
		opts := testOptions(nil)
		opts.LeaderElection.Enabled = le
		opts.Constructors = map[string]Constructor{"test": func(Context) (Controller, error) {
			close(building)
			<-release
			return ctrlFunc(func(ctx context.Context) error { close(running); <-ctx.Done(); return nil }), nil
		}}
		m := &manager{}
		if code, body := readyz(m); code != http.StatusServiceUnavailable || body != "starting" {
			t.Errorf("leader election %v: before Run: %d %q, want 503 starting", le, code, body)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- runWith(ctx, client, opts, m) }()
		wait(t, building, "the leader to build its controllers")
		want := http.StatusServiceUnavailable
		if le {
			want = http.StatusOK
		}
		if code, body := readyz(m); code != want {
			t.Errorf("leader election %v: while the new leader starts: %d %q, want %d", le, code, body, want)
		}
		close(release)
		wait(t, running, "the controller to run")
		if code, body := readyz(m); code != http.StatusOK {
			t.Errorf("leader election %v: while the controllers run: %d %q, want 200", le, code, body)
		}
		cancel()
		if err := wait(t, done, "Run to return"); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

// --profiling serves Go's profiles at /debug/pprof/ (on by default, as
// kube-controller-manager's); off, the path is not served.
func TestProfilingServesPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		m := &manager{opts: Options{Profiling: on}}
		rec := httptest.NewRecorder()
		m.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/goroutine?debug=1", nil))
		if on && (rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine profile")) {
			t.Errorf("profiling on: %d %.80q, want the goroutine profile", rec.Code, rec.Body.String())
		}
		if !on && rec.Code != http.StatusNotFound {
			t.Errorf("profiling off: %d, want 404", rec.Code)
		}
	}
}
