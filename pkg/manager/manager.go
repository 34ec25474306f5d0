// Package manager runs nodeshepherd's controllers in one process: shared
// informers, an event broadcaster, leader election on a Lease, and an HTTP
// server for /metrics, /healthz and /readyz.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Controller is one controller the manager can run.
type Controller interface {
	Run(ctx context.Context) error
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
	Controllers        []string // names, in start order
	Constructors       map[string]Constructor
	LeaderElection     LeaderElection
	MetricsBindAddress string // "0" disables the server
	DryRun             bool
	// Identity for leader election; the hostname plus a random suffix when empty.
	Identity string
	// OnServing, when set, is told the address the HTTP server listens on.
	OnServing func(addr string)
}

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
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	logger := klog.FromContext(ctx)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	isLeader := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodeshepherd", Name: "leader",
		Help: "1 while this process is the leader and runs the controllers."})
	reg.MustRegister(isLeader)

	var ready atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srvErr := make(chan error, 1)
	if opts.MetricsBindAddress != "0" && opts.MetricsBindAddress != "" {
		l, err := net.Listen("tcp", opts.MetricsBindAddress)
		if err != nil {
			return fmt.Errorf("--metrics-bind-address %s: %w", opts.MetricsBindAddress, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				srvErr <- err
			}
		}()
		logger.Info("Serving /metrics, /healthz and /readyz", "address", l.Addr().String())
		if opts.OnServing != nil {
			opts.OnServing(l.Addr().String())
		}
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	runControllers := func(ctx context.Context) error {
		factory := informers.NewSharedInformerFactory(client, 0)
		leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(v1.NamespaceNodeLease))
		mctx := Context{Client: client, RESTConfig: cfg, Informers: factory, LeaseInformers: leaseFactory, Registry: reg, Clock: clock.RealClock{},
			DryRun: opts.DryRun,
			Recorder: func(component string) record.EventRecorder {
				return broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
			}}
		var ctrls []Controller
		for _, name := range opts.Controllers {
			c, err := opts.Constructors[name](mctx)
			if err != nil {
				return fmt.Errorf("starting controller %s: %w", name, err)
			}
			ctrls = append(ctrls, c)
		}
		factory.Start(ctx.Done())
		leaseFactory.Start(ctx.Done())
		defer factory.Shutdown()
		defer leaseFactory.Shutdown()
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return ctx.Err()
			}
		}
		leaseFactory.WaitForCacheSync(ctx.Done())
		ready.Store(true)
		logger.Info("Controllers running", "controllers", opts.Controllers, "dryRun", opts.DryRun)
		var wg sync.WaitGroup
		errs := make([]error, len(ctrls))
		for i, c := range ctrls {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = c.Run(ctx) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	if !opts.LeaderElection.Enabled {
		isLeader.Set(1)
		return firstErr(runControllers(ctx), srvErr)
	}
	id := opts.Identity
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().UnixNano()%100000) // arch:allow a unique identity suffix, not a measure of time
	}
	le := opts.LeaderElection
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.ResourceName, Namespace: le.ResourceNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// Standbys are ready: they serve health and take over on failure.
	ready.Store(true)
	var runErr error
	lostLead := false
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, Name: le.ResourceName, ReleaseOnCancel: true,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				isLeader.Set(1)
				logger.Info("Became the leader", "identity", id, "lease", le.ResourceNamespace+"/"+le.ResourceName)
				ready.Store(false)
				runErr = runControllers(ctx)
			},
			OnStoppedLeading: func() {
				isLeader.Set(0)
				if ctx.Err() == nil {
					lostLead = true
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Another replica leads; standing by", "leader", identity)
				}
			},
		},
	})
	if lostLead {
		// Controllers must not run without the lease; exit so that the
		// process restarts as a standby.
		return fmt.Errorf("lost leadership of %s/%s", le.ResourceNamespace, le.ResourceName)
	}
	return firstErr(runErr, srvErr)
}

func firstErr(err error, srvErr chan error) error {
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
