// Package localcluster brings up a whole local cluster in one call: the
// control plane of pkg/controlplane, optional in-process controllers, the fake
// nodes of pkg/fakenode, and waits until they are registered; Stop tears it
// down in order. `demo`, `simulate` and the integration-test framework use it,
// so the three bring the cluster up, wait on it and stop it the same way.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// DefaultRegisterTimeout bounds the fake nodes' registration when
// Config.RegisterTimeout is zero.
const DefaultRegisterTimeout = 2 * time.Minute

// Config says what to bring up.
type Config struct {
	// ControlPlane is etcd and kube-apiserver, and optionally
	// kube-controller-manager (with its controller list) and kube-scheduler.
	// Its Dir holds the kubeconfig and the logs directory.
	ControlPlane controlplane.Config
	// Controllers, when set, runs in-process controllers (nodeshepherd's
	// manager) against the control plane from the moment it is ready until
	// Stop; it gets an admin configuration it may tune. The fake nodes start
	// after it, so that they register under the controllers' eyes, as real
	// kubelets join a running cluster.
	Controllers func(ctx context.Context, cfg *rest.Config) error
	// FakeNodes describes the fake nodes (zones, counts, capacity, kubelet
	// timing); nil starts none. A nil Client is set to the cluster's admin client.
	FakeNodes *fakenode.Config
	// HollowNodes, instead of FakeNodes, runs kubemark's hollow nodes
	// (pkg/hollownode: the real kubelet code, one process per node) against
	// the control plane. Unlike fake nodes they start before the
	// controllers, which start once every hollow node is Ready and renews
	// its Lease: a real kubelet creates its Lease some 10 s after it
	// registers, and a node lifecycle controller watching from before that
	// sees every node silent for its grace period (all zones in full
	// disruption) while the scenario is already being set up. A
	// nil Server is set to the control plane's admin configuration, an
	// empty Binary to kubemark in the control plane's bin directory, an
	// empty Dir to hollow-nodes in the control plane's directory.
	HollowNodes *hollownode.Config
	// RegisterTimeout bounds the fake nodes' registration;
	// DefaultRegisterTimeout when zero.
	RegisterTimeout time.Duration
	// Progress, when set, is told of each step of the bring-up as it
	// completes, for the CLI's progress lines.
	Progress func(Step, *Cluster)
}

// Step is a completed step of the bring-up.
type Step int

// The steps, in order. A step that is not configured is not reported.
const (
	// ControlPlaneReady: every control-plane component answers its health check.
	ControlPlaneReady Step = iota
	// ControllersStarted: Config.Controllers runs.
	ControllersStarted
	// NodesRegistered: every fake node is registered and simulated.
	NodesRegistered
)

// Validate reports every invalid setting at once, before anything starts.
func (c *Config) Validate() error {
	var errs []error
	if c.ControlPlane.ReadyTimeout < 0 {
		errs = append(errs, fmt.Errorf("control plane ready timeout must not be negative, got %v", c.ControlPlane.ReadyTimeout))
	}
	if c.RegisterTimeout < 0 {
		errs = append(errs, fmt.Errorf("fake node register timeout must not be negative, got %v", c.RegisterTimeout))
	}
	if c.FakeNodes != nil {
		nodes := *c.FakeNodes
		nodes.Complete()
		if err := nodes.ValidateSettings(); err != nil {
			errs = append(errs, fmt.Errorf("fake nodes: %w", err))
		}
	}
	if c.FakeNodes != nil && c.HollowNodes != nil {
		errs = append(errs, errors.New("fake nodes and hollow nodes together are not supported: give one of them"))
	}
	return errors.Join(errs...)
}

// registerTimeout is RegisterTimeout with its default.
func (c *Config) registerTimeout() time.Duration {
	if c.RegisterTimeout == 0 {
		return DefaultRegisterTimeout
	}
	return c.RegisterTimeout
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg         Config
	plane       *controlplane.ControlPlane
	client      kubernetes.Interface
	controllers *task
	nodes       *Nodes
	hollow      *hollownode.Fleet
	// failed gets the first unexpected exit of an in-process part.
	failed   chan error
	stopOnce sync.Once
}

// Start brings the cluster up: the control plane, then the controllers, then
// the fake nodes, returning once every fake node is registered (with hollow
// nodes: the control plane, the hollow nodes, Ready and with their Leases,
// then the controllers). The in-process parts run until Stop or until ctx
// ends. On error everything already started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, failed: make(chan error, 2)}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	if cfg.HollowNodes != nil {
		// The kubelets heartbeat before the controllers judge them.
		if err := c.startHollowNodes(ctx); err != nil {
			return nil, err
		}
		c.startControllers(ctx)
		return c, nil
	}
	c.startControllers(ctx)
	if err := c.startNodes(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) report(s Step) {
	if c.cfg.Progress != nil {
		c.cfg.Progress(s, c)
	}
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	plane, err := controlplane.Start(ctx, c.cfg.ControlPlane)
	if err != nil {
		return err
	}
	c.plane = plane
	if c.client, err = kubernetes.NewForConfig(kube.Fast(plane.RESTConfig())); err != nil {
		return err
	}
	c.report(ControlPlaneReady)
	return nil
}

func (c *Cluster) startControllers(ctx context.Context) {
	if c.cfg.Controllers == nil {
		return
	}
	run := c.cfg.Controllers
	restCfg := c.plane.RESTConfig()
	c.controllers = startTask(ctx, "controllers", func(ctx context.Context) error { return run(ctx, restCfg) }, c.failed)
	c.report(ControllersStarted)
}

func (c *Cluster) startNodes(ctx context.Context) error {
	if c.cfg.FakeNodes == nil {
		return nil
	}
	ncfg := *c.cfg.FakeNodes
	if ncfg.Client == nil {
		ncfg.Client = c.client
	}
	nodes, err := startNodes(ctx, ncfg, c.cfg.registerTimeout(), c.failed)
	if err != nil {
		return err
	}
	c.nodes = nodes
	c.report(NodesRegistered)
	return nil
}

func (c *Cluster) startHollowNodes(ctx context.Context) error {
	hcfg := *c.cfg.HollowNodes
	if hcfg.Server == nil {
		hcfg.Server = c.plane.RESTConfig()
	}
	if hcfg.Binary == "" {
		binDir := c.cfg.ControlPlane.BinDir
		if binDir == "" {
			binDir = controlplane.FindBinDir()
		}
		hcfg.Binary = filepath.Join(binDir, hollownode.Binary)
	}
	if hcfg.Dir == "" {
		hcfg.Dir = filepath.Join(c.plane.Dir(), "hollow-nodes")
	}
	fleet, err := hollownode.Start(ctx, hcfg, c.cfg.registerTimeout(), nil)
	if err != nil {
		return fmt.Errorf("hollow nodes: %w", err)
	}
	c.hollow = fleet
	c.report(NodesRegistered)
	return nil
}

// Stop stops the fake nodes, then the controllers, then the control plane
// (which removes a temporary directory). It is safe to call more than once
// and from several goroutines; every call returns once everything stopped.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.hollow != nil {
			c.hollow.Stop()
		}
		c.nodes.Stop()
		c.controllers.stop()
		if c.plane != nil {
			c.plane.Stop()
		}
	})
}

// Failed receives an error when the fake nodes or the controllers stop on
// their own while the cluster runs; never after Stop or the end of Start's
// context.
func (c *Cluster) Failed() <-chan error { return c.failed }

// ControlPlane is the running control plane.
func (c *Cluster) ControlPlane() *controlplane.ControlPlane { return c.plane }

// Client is an admin client without client-side throttling worth noticing.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// RESTConfig is an admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return c.plane.RESTConfig() }

// KubeconfigPath is the admin kubeconfig the control plane wrote, for kubectl.
func (c *Cluster) KubeconfigPath() string { return c.plane.KubeconfigPath() }

// Dir holds the control plane's files.
func (c *Cluster) Dir() string { return c.plane.Dir() }

// LogDir holds one log file per control-plane component.
func (c *Cluster) LogDir() string { return filepath.Join(c.plane.Dir(), "logs") }

// Hollow is the hollow node fleet, nil without hollow nodes.
func (c *Cluster) Hollow() *hollownode.Fleet { return c.hollow }

// Nodes is the fake node manager, nil without fake nodes.
func (c *Cluster) Nodes() *fakenode.Manager {
	if c.nodes == nil {
		return nil
	}
	return c.nodes.Manager()
}
