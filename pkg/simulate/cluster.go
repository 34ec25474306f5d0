package simulate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/cloudnodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/readinessrestore"
	remediationctl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// clusterConfig is the local cluster of this run, the scenario's durations
// divided by the time scale: in upstream mode kube-controller-manager runs
// every controller and kube-scheduler schedules; in nodeshepherd mode
// nodeshepherd's manager runs in-process next to kube-controller-manager's
// other controllers, or, for a companion scenario, next to all of them and
// kube-scheduler. Both runs' clients have the same limits, and
// kube-scheduler the time-scaled settings of nodeshepherd's scheduler. It
// names the components and their settings in res.
func (r *runner) clusterConfig(res *RunResult) (localcluster.Config, error) {
	scale := r.opts.TimeScale
	cfg, kcmArgs, err := r.sc.Controllers.scaled(r.sc.path, scale)
	if err != nil {
		return localcluster.Config{}, err
	}
	asked, _, err := r.sc.Controllers.parse(r.sc.path)
	if err != nil {
		return localcluster.Config{}, err
	}
	sched := upstreamScheduler(cfg)
	res.Settings = runSettings(r.opts.Mode, scale, cfg, sched, kcmArgs, asked.Scheduler.PodInitialBackoff, asked.Scheduler.PodMaxBackoff)
	tol := fmt.Sprint(scaleSeconds(defaultTolerationSeconds, scale))
	nodes := r.sc.fakeNodeConfig(scale)
	if r.sc.hasRepairSteps() && r.opts.Mode == ModeNodeShepherd {
		cluster := func(d time.Duration) string {
			return time.Duration(float64(d) * scale).Round(time.Millisecond).String()
		}
		res.Settings = append(res.Settings, Setting{Name: settingDowntime, Value: cluster(nodes.RebootDowntime) + " / " + cluster(nodes.ReplaceDowntime),
			Note: "how long the fake cloud's repairs keep a machine off (Reboot steps) or its Node gone (Replace steps), cluster.machines; upstream repairs nothing"})
	}
	lc := localcluster.Config{
		ControlPlane: controlplane.Config{Dir: r.opts.Dir, BinDir: r.opts.BinDir, ControllerManager: true, ScrubOnStop: true,
			ControllerManagerArgs: kcmClientArgs(),
			APIServerArgs:         []string{"--default-not-ready-toleration-seconds=" + tol, "--default-unreachable-toleration-seconds=" + tol}},
		FakeNodes:       &nodes,
		RegisterTimeout: r.opts.SetupTimeout,
	}
	if r.opts.NodeKind == NodeKindHollow {
		hollow, err := r.sc.hollowNodeConfig(r.opts.BinDir)
		if err != nil {
			return localcluster.Config{}, err
		}
		hollow.Verbosity = r.opts.KubeletVerbosity
		lc.FakeNodes, lc.HollowNodes = nil, hollow
		res.Settings = append(res.Settings, Setting{Name: settingHollowKubelet,
			Value: fmt.Sprintf("%v / %v / %v / %v", hollowLeaseDuration, hollowLeaseRenewInterval, hollowNodeStatusUpdateFrequency, hollowNodeStatusReportFrequency),
			Note:  "hollow nodes (kubemark, the real kubelet): lease duration / renew interval / node status update / report frequency, fixed by kubemark, real time"})
	}
	// kube-controller-manager with every controller, and kube-scheduler: the
	// upstream run, and a managed cluster that nodeshepherd runs next to.
	upstream := func() {
		lc.ControlPlane.Controllers = "*"
		lc.ControlPlane.ControllerManagerArgs = append(append(lc.ControlPlane.ControllerManagerArgs, kcmArgs...), "--allocate-node-cidrs=true",
			"--cluster-cidr="+podCIDR, "--service-cluster-ip-range="+controlplane.ServiceClusterIPRange)
		lc.ControlPlane.Scheduler = true
		lc.ControlPlane.SchedulerConfig = &sched
	}
	switch {
	case r.opts.Mode == ModeUpstream:
		upstream()
		res.Components = "kube-controller-manager (" + strings.Join(controllers.Replaced(), ", ") + ") and kube-scheduler"
	case r.opts.Mode == ModeNodeShepherd && r.sc.Companion:
		upstream()
		var names []string
		if lc.Controllers, names, err = companionControllers(cfg, r.sc.hasPolicies()); err != nil {
			return localcluster.Config{}, err
		}
		res.Components = "nodeshepherd in companion mode (" + strings.Join(names, ", ") +
			") next to kube-controller-manager (" + strings.Join(controllers.Replaced(), ", ") + ") and kube-scheduler"
	case r.opts.Mode == ModeNodeShepherd:
		var names []string
		if lc.Controllers, names, err = nodeShepherdControllers(cfg, r.sc.runsOutOfService(), r.sc.hasPolicies()); err != nil {
			return localcluster.Config{}, err
		}
		res.Components = "nodeshepherd (" + strings.Join(names, ", ") + ") with kube-controller-manager for the rest"
	default:
		return localcluster.Config{}, fmt.Errorf("unknown mode %q", r.opts.Mode)
	}
	if r.opts.Mode == ModeNodeShepherd && r.sc.hasPolicies() {
		// The CRD before the controllers: the remediation controller lists
		// policies from its start.
		lc.Controllers = withRemediationCRD(lc.Controllers)
	}
	return lc, nil
}

// nodeShepherdControllers runs nodeshepherd's controllers and scheduler as
// `run` would, with node IPAM allocating from podCIDR, and without the cloud
// node lifecycle controller: upstream's run has none. With outOfService the
// outofservice controller runs too, asking the fake cloud provider (which
// answers from the fake nodes' machine-* faults). With remediation the
// remediation controller runs, and drain with it (its Drain steps), with
// the same provider: the fake nodes carry out its reboots and replacements.
func nodeShepherdControllers(cfg *controllers.Config, outOfService, remediation bool) (func(context.Context, *rest.Config) error, []string, error) {
	cfg.Scheduler.SchedulerName = v1.DefaultSchedulerName
	cfg.NodeIPAM = nodeipam.Config{AllocateNodeCIDRs: true, ClusterCIDR: podCIDR, ServiceClusterIPRange: controlplane.ServiceClusterIPRange}
	var explicit []string
	if remediation {
		explicit = append(explicit, remediationctl.Name)
	}
	names := slices.DeleteFunc(cfg.Select(controllers.Names, explicit), func(n string) bool { return n == cloudnodelifecycle.Name })
	if outOfService || remediation {
		cfg.CloudNodeLifecycle.Cloud.Name = fakecloud.ProviderName
	}
	if outOfService {
		names = append(names, outofservice.Name)
	}
	if err := cfg.Validate(names); err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, rc *rest.Config) error {
		rc.QPS, rc.Burst = clientQPS, clientBurst
		return manager.Run(ctx, rc, manager.Options{Controllers: names, Constructors: controllers.Constructors(*cfg), MetricsBindAddress: "0"})
	}, names, nil
}

// companionControllers runs what nodeshepherd runs on a managed cluster: the
// companions `run` would select (drain with drain conditions), without the
// scheduler (kube-scheduler schedules; a second scheduler would have no pods),
// and readinessrestore, which is why one runs it there.
//
// With remediation the remediation controller runs too (it is a companion),
// and drain with it, with the fake cloud provider.
func companionControllers(cfg *controllers.Config, remediation bool) (func(context.Context, *rest.Config) error, []string, error) {
	explicit := []string{readinessrestore.Name}
	if remediation {
		explicit = append(explicit, remediationctl.Name)
		cfg.CloudNodeLifecycle.Cloud.Name = fakecloud.ProviderName
	}
	selected := cfg.Select(controllers.Names, explicit)
	var names []string
	for _, n := range controllers.Companions() {
		if slices.Contains(selected, n) && n != scheduler.Name {
			names = append(names, n)
		}
	}
	if err := cfg.Validate(names); err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, rc *rest.Config) error {
		rc.QPS, rc.Burst = clientQPS, clientBurst
		return manager.Run(ctx, rc, manager.Options{Controllers: names, Constructors: controllers.Constructors(*cfg), MetricsBindAddress: "0"})
	}, names, nil
}

// waitOptions print the progress of a setup wait as every run does: a
// "waiting for" line every 5s, then the status that ended the wait.
func (r *runner) waitOptions(what string) localcluster.WaitOptions {
	return localcluster.WaitOptions{Progress: func(status string, done bool) {
		if done {
			r.printf("%s", status)
		} else {
			r.printf("waiting for %s: %s", what, status)
		}
	}}
}

// setupError says what to do about a setup wait that timed out.
func (r *runner) setupError(err error) error {
	if wErr := (*localcluster.WaitError)(nil); errors.As(err, &wErr) {
		return fmt.Errorf("%w; raise --setup-timeout or see the logs in %s/logs", err, r.opts.Dir)
	}
	return err
}

// waitNodes waits until every fake node is Ready and schedulable: the
// not-ready NoSchedule taint of registration is gone.
func (r *runner) waitNodes(ctx context.Context) error {
	return r.setupError(r.cluster.WaitNodesReady(ctx, r.waitOptions(localcluster.NodesReadyWhat)))
}

// waitFor checks cond every 200ms, printing its progress every 5s, until it
// holds, ctx ends or a part of the cluster stops.
func (r *runner) waitFor(ctx context.Context, what string, cond func() (string, bool)) error {
	err := r.cluster.Wait(ctx, what, func(context.Context) (string, bool) { return cond() }, r.waitOptions(what))
	return r.setupError(err)
}
