// Package manager runs nodeshepherd's controllers in one process: shared
// informers, an event broadcaster, leader election on a Lease, and an HTTP
// server for /metrics, /healthz, /livez and /readyz (pkg/serving).
package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/pprof"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/clientmetrics"
	"github.com/nodeshepherd/nodeshepherd/pkg/faulthook"
	"github.com/nodeshepherd/nodeshepherd/pkg/serving"
)

// Controller is one controller the manager can run. Run returns only once
// ctx ends; a return before that is a failure of the controller.
type Controller interface {
	Run(ctx context.Context) error
}

// HealthChecker is implemented by controllers that can tell that they stopped
// making progress (a step that does not end, a loop that no longer turns;
// every controller does, through controllerutil.Base): the manager then
// fails /healthz and gives up leadership, so that a standby takes over.
type HealthChecker interface {
	Healthy(now time.Time) error
}

// Context is what a controller constructor gets.
type Context struct {
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	Informers  informers.SharedInformerFactory
	// LeaseInformers watch kube-node-lease only.
	LeaseInformers informers.SharedInformerFactory
	Registry       prometheus.Registerer
	Clock          clock.WithTickerAndDelayedExecution
	// Recorder returns an event recorder with the given component name.
	Recorder func(component string) record.EventRecorder
	DryRun   bool
	// ProgressTimeout is Options.ProgressTimeout, for the controllers'
	// health checks (zero: their default).
	ProgressTimeout time.Duration
	// Controllers are the names of the controllers this process runs, for
	// one whose work another carries out (remediation's Fence steps and
	// outofservice).
	Controllers []string
}

// Constructor builds a controller.
type Constructor func(Context) (Controller, error)

// LeaderElection are the leader-election settings, kube-controller-manager's.
type LeaderElection struct {
	Enabled           bool
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	ResourceName      string
	ResourceNamespace string
}

// DefaultLeaderElection returns kube-controller-manager's defaults, with
// nodeshepherd's lease name.
func DefaultLeaderElection() LeaderElection {
	return LeaderElection{Enabled: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second,
		RetryPeriod: 2 * time.Second, ResourceName: "nodeshepherd", ResourceNamespace: "kube-system"}
}

// AddFlags registers the leader-election flags.
func (l *LeaderElection) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&l.Enabled, "leader-elect", l.Enabled, "Elect a leader on a Lease before running the controllers; run two replicas or more for high availability.")
	fs.DurationVar(&l.LeaseDuration, "leader-elect-lease-duration", l.LeaseDuration, "How long a standby waits after the last renewal before it takes over.")
	fs.DurationVar(&l.RenewDeadline, "leader-elect-renew-deadline", l.RenewDeadline, "How long the leader tries to renew before it gives up leading (must be shorter than the lease duration).")
	fs.DurationVar(&l.RetryPeriod, "leader-elect-retry-period", l.RetryPeriod, "How often leaders renew and standbys try to acquire.")
	fs.StringVar(&l.ResourceName, "leader-elect-resource-name", l.ResourceName, "Name of the Lease used for leader election.")
	fs.StringVar(&l.ResourceNamespace, "leader-elect-resource-namespace", l.ResourceNamespace, "Namespace of the Lease used for leader election.")
}

// Validate checks the leader-election settings.
func (l *LeaderElection) Validate() error {
	if !l.Enabled {
		return nil
	}
	var errs []error
	if l.RetryPeriod <= 0 || l.RenewDeadline <= 0 || l.LeaseDuration <= 0 {
		errs = append(errs, errors.New("--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive"))
	} else if l.LeaseDuration <= l.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%v) must be longer than --leader-elect-renew-deadline (%v)", l.LeaseDuration, l.RenewDeadline))
	} else if float64(l.RenewDeadline) <= leaderelection.JitterFactor*float64(l.RetryPeriod) {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%v) must be longer than %.1f × --leader-elect-retry-period (%v)", l.RenewDeadline, leaderelection.JitterFactor, l.RetryPeriod))
	}
	if l.ResourceName == "" || l.ResourceNamespace == "" {
		errs = append(errs, errors.New("--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty"))
	}
	return errors.Join(errs...)
}

// Options configure a manager run.
type Options struct {
	Controllers    []string // names, in start order
	Constructors   map[string]Constructor
	LeaderElection LeaderElection
	// Secure serves /metrics, /healthz, /readyz and /livez on HTTPS with
	// delegated authentication and authorization (`run`'s --secure-port);
	// nil serves no HTTPS.
	Secure *serving.Secure
	// MetricsBindAddress serves them on plain HTTP without authentication
	// (`run`'s --metrics-bind-address, loopback only); "0" or "" serves none.
	MetricsBindAddress string
	// Profiling serves /debug/pprof/ on both servers (`run`'s --profiling);
	// ContentionProfiling records blocking and lock contention too.
	Profiling, ContentionProfiling bool
	DryRun                         bool
	// Identity for leader election; the hostname plus a random suffix when empty.
	Identity string
	// OnServing, when set, is told the address the plain-HTTP server
	// listens on, and OnSecureServing the HTTPS server's.
	OnServing, OnSecureServing func(addr string)
	// StopTimeout bounds how long Run waits, once its context ends or
	// leadership is lost, for the controllers to finish in-flight writes;
	// DefaultStopTimeout when zero.
	StopTimeout time.Duration
	// StartTimeout bounds how long the controllers' informer caches may
	// take to sync once this process leads; DefaultStartTimeout when zero.
	StartTimeout time.Duration
	// ProgressTimeout bounds how long a controller's step (a work item, a
	// loop's turn) may take before the controller counts as stuck: /healthz
	// fails and the Lease is given up; controllerutil.DefaultProgressTimeout
	// when zero.
	ProgressTimeout time.Duration
	// Fault breaks one controller on purpose, for failover tests only, in a
	// binary built with the faulthook tag (faulthook.Env); any other binary
	// refuses it.
	Fault string
}

// DefaultStartTimeout is how long informer caches may take to sync after
// leadership is won before the process gives up the Lease: a leader that
// cannot read what it manages must let a standby try.
const DefaultStartTimeout = 2 * time.Minute

// TestFaultEnv names the environment variable that sets Options.Fault in
// a nodeshepherd binary built for the failover tests (package faulthook).
const TestFaultEnv = faulthook.Env

// healthCheckPeriod is how often a leader asks its controllers whether they
// still make progress.
const healthCheckPeriod = time.Second

// DefaultStopTimeout is how long stopping controllers get to return: within
// a pod's default 30 s termination grace period, with time left to release
// the Lease.
const DefaultStopTimeout = 20 * time.Second

// ResolveControllers turns a --controllers value into controller names:
// "*" is every known controller, "-name" removes one, names add one.
// Unknown names are an error that lists the known ones.
func ResolveControllers(spec []string, known []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, s := range spec {
		s = strings.TrimSpace(s)
		name := strings.TrimPrefix(s, "-")
		switch {
		case s == "*":
			for _, k := range known {
				if !seen[k] {
					out, seen[k] = append(out, k), true
				}
			}
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("unknown controller %q in --controllers; known controllers: %s (and * for all)", name, strings.Join(known, ", "))
		case strings.HasPrefix(s, "-"):
			out = slices.DeleteFunc(out, func(n string) bool { return n == name })
			seen[name] = true
		case !seen[name]:
			out, seen[name] = append(out, name), true
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--controllers selects no controller")
	}
	return out, nil
}

// Run runs the selected controllers until ctx ends or leadership is lost.
// It returns once the controllers have stopped (or Options.StopTimeout has
// passed); with leader election, the Lease is released only after that.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if opts.Profiling && opts.ContentionProfiling {
		// Process-wide, as kube-controller-manager sets it.
		runtime.SetBlockProfileRate(1)
		runtime.SetMutexProfileFraction(1)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return run(ctx, client, cfg, opts)
}

// manager is one Run: what its parts share.
type manager struct {
	opts        Options
	client      kubernetes.Interface
	restConfig  *rest.Config
	clock       clock.WithTickerAndDelayedExecution
	reg         *prometheus.Registry
	isLeader    prometheus.Gauge
	broadcaster record.EventBroadcaster
	// ready answers /readyz. It goes false -> true once and never back (a
	// failure answers 500 instead): with leader election once the process
	// serves and campaigns, so a standby is ready and a new leader stays
	// ready while its caches sync (a Service or a rollout must not see the
	// pod flap when it takes over; caches that do not sync fail it); without,
	// once its caches synced. docs/operations.md says the same.
	ready atomic.Bool
	// running is true from the controllers' start until they have returned;
	// the Lease is not released while it is true.
	running atomic.Bool
	// active are the controllers whose Run has not returned, for the error
	// that names those that do not stop in time.
	activeMu sync.Mutex
	active   map[string]bool
	// failure is why the controllers stopped working (nil while they work):
	// /healthz and /livez report it until the process exits.
	failure atomic.Pointer[error]
	// failedC is closed on the first failure (failedSignal).
	failedOnce sync.Once
	failedC    chan struct{}
}

// fail records the first failure of the controllers.
func (m *manager) fail(err error) {
	if m.failure.CompareAndSwap(nil, &err) {
		close(m.failedSignal())
	}
}

// failedSignal is closed once the controllers failed: the others are then
// told to stop, and get StopTimeout to do so, as on shutdown.
func (m *manager) failedSignal() chan struct{} {
	m.failedOnce.Do(func() { m.failedC = make(chan struct{}) })
	return m.failedC
}

func (m *manager) failed() error {
	if p := m.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func run(ctx context.Context, client kubernetes.Interface, cfg *rest.Config, opts Options) error {
	return runWith(ctx, client, opts, &manager{restConfig: cfg})
}

// runWith runs with m, which tests keep to look at its health afterwards.
func runWith(ctx context.Context, client kubernetes.Interface, opts Options, m *manager) error {
	if err := faulthook.Arm(opts.Fault); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.opts, m.client, m.clock, m.reg = opts, client, clock.RealClock{}, prometheus.NewRegistry()
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.isLeader = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodeshepherd", Name: "leader",
		Help: "1 while this process is the leader and runs the controllers."})
	m.reg.MustRegister(m.isLeader)
	if err := clientmetrics.Register(m.reg); err != nil { // rest_client_*, as kube-controller-manager
		return err
	}

	srvErr, err := m.serve(ctx)
	if err != nil {
		return err
	}
	events := startEvents(ctx, client)
	m.broadcaster = events
	defer events.shutdown(ctx, m.clock, 5*time.Second)

	if opts.LeaderElection.Enabled {
		err = m.lead(ctx)
	} else {
		m.isLeader.Set(1)
		err = m.runUntilStopped(ctx)
	}
	if err != nil {
		return err
	}
	select {
	case err := <-srvErr:
		return err
	default:
		return nil
	}
}

// serve starts the servers of /metrics, /healthz, /livez and /readyz:
// HTTPS with delegated authentication and authorization (Options.Secure),
// plain HTTP (Options.MetricsBindAddress), either, both or none. They stop
// when ctx ends; a failure to serve arrives on the channel.
func (m *manager) serve(ctx context.Context) (<-chan error, error) {
	srvErr := make(chan error, 2)
	mux := m.handler()
	logger := klog.FromContext(ctx)
	if s := m.opts.Secure; s != nil {
		addr, err := s.Serve(ctx, mux, srvErr)
		if err != nil {
			return nil, err
		}
		logger.Info("Serving /metrics, /healthz, /livez and /readyz on HTTPS, with delegated authentication and authorization", "address", addr)
		if m.opts.OnSecureServing != nil {
			m.opts.OnSecureServing(addr)
		}
	}
	if addr := m.opts.MetricsBindAddress; addr != "0" && addr != "" {
		addr, err := serving.ServeInsecure(ctx, addr, mux, srvErr)
		if err != nil {
			return nil, err
		}
		logger.Info("Serving /metrics, /healthz, /livez and /readyz on plain HTTP, without authentication", "address", addr)
		if m.opts.OnServing != nil {
			m.opts.OnServing(addr)
		}
	}
	return srvErr, nil
}

// handler answers /metrics, /healthz, /livez and /readyz.
func (m *manager) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	healthz := func(w http.ResponseWriter, _ *http.Request) {
		if err := m.failed(); err != nil {
			http.Error(w, "controllers failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/livez", healthz)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := m.failed(); err != nil {
			http.Error(w, "controllers failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if !m.ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if m.opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// runUntilStopped runs the controllers under ctx and waits for them to
// return: once ctx ends they get StopTimeout to finish in-flight writes.
func (m *manager) runUntilStopped(ctx context.Context) error {
	timeout := m.opts.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	m.running.Store(true)
	done := make(chan error, 1)
	go func() {
		err := m.runControllers(ctx)
		m.running.Store(false)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	case <-m.failedSignal(): // a controller that does not stop must not hold the process
	}
	select {
	case err := <-done:
		return err
	case <-m.clock.After(timeout):
		m.activeMu.Lock()
		names := slices.Sorted(maps.Keys(m.active))
		m.activeMu.Unlock()
		if len(names) == 0 {
			names = []string{"(still starting)"}
		}
		return errors.Join(m.failed(), fmt.Errorf("controllers did not stop within %v of shutdown: %s", timeout, strings.Join(names, ", ")))
	}
}

// runControllers builds the controllers, starts the informers they asked
// for and runs the controllers until ctx ends. A controller that cannot be
// built, caches that do not sync within StartTimeout, a controller that
// returns or panics before ctx ends, or one that reports itself unhealthy
// stop them all with an error: the process then exits and gives up the
// Lease, rather than lead while managing nothing.
func (m *manager) runControllers(ctx context.Context) error {
	err := m.superviseControllers(ctx)
	if err != nil && ctx.Err() == nil {
		m.fail(err)
	}
	return err
}

func (m *manager) superviseControllers(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	factory := informers.NewSharedInformerFactory(m.client, 0)
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(m.client, 0, informers.WithNamespace(v1.NamespaceNodeLease))
	mctx := Context{Client: m.client, RESTConfig: m.restConfig, Informers: factory, LeaseInformers: leaseFactory,
		Registry: m.reg, Clock: m.clock, DryRun: m.opts.DryRun, ProgressTimeout: m.opts.ProgressTimeout, Controllers: m.opts.Controllers,
		Recorder: func(component string) record.EventRecorder {
			return m.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
		}}
	var ctrls []Controller
	for _, name := range m.opts.Controllers {
		c, err := m.opts.Constructors[name](mctx)
		if err != nil {
			return fmt.Errorf("starting controller %s: %w", name, err)
		}
		ctrls = append(ctrls, m.withFault(name, c))
	}
	factory.Start(ctx.Done())
	leaseFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer leaseFactory.Shutdown()
	defer cancel(nil) // before Shutdown, which waits for the informers to stop
	if err := m.waitForCaches(ctx, factory, leaseFactory); err != nil {
		return err
	}
	m.ready.Store(true)
	logger := klog.FromContext(ctx)
	logger.Info("Controllers running", "controllers", m.opts.Controllers, "dryRun", m.opts.DryRun)
	var wg sync.WaitGroup
	errs := make([]error, len(ctrls))
	m.activeMu.Lock()
	m.active = map[string]bool{}
	for _, name := range m.opts.Controllers {
		m.active[name] = true
	}
	m.activeMu.Unlock()
	for i, c := range ctrls {
		name := m.opts.Controllers[i]
		wg.Go(func() {
			errs[i] = runGuarded(ctx, name, c)
			if ctx.Err() == nil { // returned on its own: the others stop too
				if errs[i] == nil {
					errs[i] = fmt.Errorf("controller %s stopped on its own", name)
				}
				cancel(errs[i])
			}
			m.activeMu.Lock()
			delete(m.active, name)
			m.activeMu.Unlock()
		})
	}
	wg.Go(func() { m.watchHealth(ctx, cancel, ctrls) })
	wg.Wait()
	if cause := context.Cause(ctx); parent.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		logger.Error(cause, "Controllers stopped: giving up")
		return cause
	}
	return errors.Join(errs...)
}

// runGuarded runs one controller, turning a panic in its goroutine into an
// error that names it (the process then exits and gives up the Lease).
func runGuarded(ctx context.Context, name string, c Controller) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("controller %s panicked: %v", name, r)
		}
	}()
	return c.Run(ctx)
}

// waitForCaches waits for the informers' first lists, at most StartTimeout.
func (m *manager) waitForCaches(ctx context.Context, factories ...informers.SharedInformerFactory) error {
	timeout := m.opts.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := m.clock.NewTimer(timeout)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel()
		case <-wctx.Done():
		}
	}()
	var missing []string
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(wctx.Done()) {
			if !ok {
				missing = append(missing, typ.String())
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	slices.Sort(missing)
	return fmt.Errorf("informer caches did not sync within %v (--controller-start-timeout): %s; check the RBAC of this process's identity and the API server", timeout, strings.Join(missing, ", "))
}

// watchHealth asks the controllers that can tell whether they still make
// progress, every healthCheckPeriod, and stops them all on the first that
// does not.
func (m *manager) watchHealth(ctx context.Context, cancel context.CancelCauseFunc, ctrls []Controller) {
	ticker := m.clock.NewTicker(healthCheckPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		for i, c := range ctrls {
			h, ok := c.(HealthChecker)
			if !ok {
				continue
			}
			if err := h.Healthy(m.clock.Now()); err != nil {
				err = fmt.Errorf("controller %s is not working: %w", m.opts.Controllers[i], err)
				m.fail(err)
				cancel(err)
				return
			}
		}
	}
}

// withFault breaks controller name as Options.Fault asks: panic: and exit:
// replace its Run (hang: is in its tracked steps, controllerutil). Only a
// binary built with the faulthook tag has this; the release build has no
// fault to arm.
func (m *manager) withFault(name string, c Controller) Controller {
	if run := faulthook.Replace(name, m.clock.After); run != nil {
		return faulty{c, run}
	}
	return c
}

// faulty replaces a controller's Run and keeps its health check.
type faulty struct {
	Controller
	run func(context.Context) error
}

func (f faulty) Run(ctx context.Context) error { return f.run(ctx) }

func (f faulty) Healthy(now time.Time) error {
	if h, ok := f.Controller.(HealthChecker); ok {
		return h.Healthy(now)
	}
	return nil
}
