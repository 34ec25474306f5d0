// Package run implements `nodeshepherd run`: the controllers against a cluster.
package run

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/faulthook"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/serving"
)

type options struct {
	configFile  string
	kube        cli.KubeFlags
	controllers []string
	leader      manager.LeaderElection
	serving     serving.Options
	dryRun      bool
	startTimeout,
	stopTimeout,
	progressTimeout time.Duration
	config controllers.Config
}

// NewCommand returns `nodeshepherd run`.
func NewCommand() *cobra.Command { return newCommand(newOptions()) }

func newCommand(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "Run nodeshepherd's controllers against a cluster",
		Long: `Run the selected controllers against a cluster (--kubeconfig, $KUBECONFIG, or in-cluster
credentials), leader-elected on a Lease.

/metrics, /healthz, /readyz and /livez are served as kube-controller-manager serves
them: on HTTPS (--secure-port, default 10261; a self-signed certificate made in memory
unless --tls-cert-file and --tls-private-key-file are given), with bearer tokens
checked by TokenReview and requests authorized by SubjectAccessReview (verb get on
the path, e.g. nonResourceURLs ["/metrics"]), through the controllers' own connection
unless --authentication-kubeconfig / --authorization-kubeconfig name another. The
--authorization-always-allow-paths (the health paths) need no token. Plain HTTP
without authentication only on request, on a loopback address, for local runs:
--metrics-bind-address=127.0.0.1:8080.

Controllers:
` + controllerHelp() + `

Run kube-controller-manager with
--controllers=` + controllers.KubeControllerManagerFlag() + ` next to it. Flag names and defaults follow kube-controller-manager.
Where kube-controller-manager's cannot be turned off (a managed cluster), run only the controllers
that can run next to them: ` + strings.Join(controllers.Companions(), ", ") + `; the others are refused while
managedFields show kube-controller-manager writing what they own (--allow-conflicting-writers; docs/companion.md).
The scheduler named default-scheduler is refused while kube-scheduler's leader Lease is live or its
writes show it serving that name.`,
		Example: `  nodeshepherd run --kubeconfig ~/.kube/config --controllers=nodelifecycle,tainteviction
  nodeshepherd run --dry-run --leader-elect=false   # report what would be done, write nothing
  nodeshepherd run --kubeconfig ~/.kube/config --secure-port=0 --metrics-bind-address=127.0.0.1:8080   # local: plain HTTP on loopback
  nodeshepherd run --controllers=drain --drain-condition=KernelDeadlock=True,10m \
      --drain-condition=Ready=Unknown,30m --max-concurrent-drains=2 --group-by-label=topology.kubernetes.io/zone
  nodeshepherd run --controllers=scheduler --scheduler-name=default-scheduler   # in place of kube-scheduler`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.configFile != "" {
				if err := config.Apply(o.configFile, cmd.Flags(), defaultSections); err != nil {
					return &cli.UsageError{Err: err}
				}
			}
			opts, err := o.validate()
			if err != nil {
				return err
			}
			cfg, err := o.kube.RESTConfig("nodeshepherd")
			if err != nil {
				return err
			}
			if opts.Secure, err = o.serving.NewSecure(cfg); err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, opts)
		},
	}
	f := c.Flags()
	f.SortFlags = false
	f.StringVar(&o.configFile, "config", "", "A NodeShepherdConfiguration file with any of the settings below ('nodeshepherd config default' prints one); flags given here override it.")
	for _, s := range sections(o) {
		s.Register(f)
	}
	return c
}

// sections are the run command's flags grouped as the configuration file
// has them: the manager's, then the controllers' from the registry; the
// flags of a fresh options are the defaults.
func sections(o *options) []config.Section {
	return append([]config.Section{
		{Name: "clientConnection", Help: "How to reach the API server.", Register: func(f *pflag.FlagSet) { o.kube.AddFlags(f, 50, 100) }},
		{Name: "manager", Help: "Which controllers run, and the server of /metrics, /healthz, /readyz and /livez: HTTPS with delegated authentication and authorization, as kube-controller-manager's.", Register: func(f *pflag.FlagSet) {
			f.StringSliceVar(&o.controllers, "controllers", []string{"*"}, "Controllers to run: names from "+strings.Join(controllers.Names, ", ")+"; * for all; -name to leave one out.")
			o.serving.AddFlags(f)
			f.BoolVar(&o.dryRun, "dry-run", false, "Compute everything and report by log, event and metric (nodeshepherd_dry_run_actions_total) what would be written; write nothing else.")
			f.DurationVar(&o.startTimeout, "controller-start-timeout", manager.DefaultStartTimeout, "Once leading, how long the informer caches may take to sync; then /healthz fails, the Lease is released and the process exits non-zero, so that a standby takes over.")
			f.DurationVar(&o.progressTimeout, "controller-progress-timeout", controllerutil.DefaultProgressTimeout, fmt.Sprintf("How long one step of a controller (a work item such as a node or a pod, a turn of a periodic loop) may take; a controller stuck longer fails /healthz, and the process releases the Lease and exits non-zero, so that a standby takes over (at least %v, above one write's timeout).", controllerutil.MinProgressTimeout))
			f.DurationVar(&o.stopTimeout, "controller-stop-timeout", manager.DefaultStopTimeout, "On shutdown or lost leadership, how long the controllers get to finish in-flight writes before the process exits; the Lease is released only after they stopped.")
		}},
		{Name: "leaderElection", Help: "Leader election on a Lease, so that replicas take over from each other.", Register: o.leader.AddFlags},
	}, o.config.Sections()...)
}

// controllerHelp lists the registry's controllers with their help, the
// name in a 16-column margin (on a line of its own when longer).
func controllerHelp() string {
	var b strings.Builder
	for i, d := range controllers.Registry() {
		if i > 0 {
			b.WriteString("\n")
		}
		lines := strings.Split(d.Help, "\n")
		if len(d.Name) < 16 {
			fmt.Fprintf(&b, "  %-16s%s", d.Name, lines[0])
			lines = lines[1:]
		} else {
			b.WriteString("  " + d.Name)
		}
		for _, l := range lines {
			b.WriteString("\n" + strings.Repeat(" ", 18) + l)
		}
	}
	return b.String()
}

// defaultSections are the sections bound to a fresh options: their flags
// hold the defaults.
func defaultSections() []config.Section { return sections(newOptions()) }

// WriteDefaultConfig prints the complete default configuration file.
func WriteDefaultConfig(w io.Writer) error {
	return config.WriteDefault(w, defaultSections())
}

func newOptions() *options {
	return &options{leader: manager.DefaultLeaderElection(), config: controllers.Default(), serving: serving.NewOptions()}
}

func (o *options) validate() (manager.Options, error) {
	var errs []error
	if err := o.kube.Validate(); err != nil {
		errs = append(errs, err)
	}
	names, err := manager.ResolveControllers(o.controllers, controllers.Names)
	if err != nil {
		errs = append(errs, err)
	}
	names = o.config.Select(names, o.controllers)
	if err := o.leader.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.config.Validate(names); err != nil {
		errs = append(errs, err)
	}
	if err := o.serving.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.startTimeout <= 0 || o.stopTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--controller-start-timeout (%v) and --controller-stop-timeout (%v) must be positive", o.startTimeout, o.stopTimeout))
	}
	if o.progressTimeout < controllerutil.MinProgressTimeout {
		errs = append(errs, fmt.Errorf("--controller-progress-timeout (%v) must be at least %v: a write may take %v before it times out", o.progressTimeout, controllerutil.MinProgressTimeout, kube.WriteTimeout))
	}
	fault := os.Getenv(faulthook.Env)
	if err := faulthook.Check(fault); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return manager.Options{}, &cli.UsageError{Err: errors.Join(errs...)}
	}
	return manager.Options{
		Controllers: names, LeaderElection: o.leader, MetricsBindAddress: o.serving.InsecureAddress, DryRun: o.dryRun,
		Profiling: o.serving.Profiling, ContentionProfiling: o.serving.ContentionProfiling,
		Constructors: controllers.Constructors(o.config), StartTimeout: o.startTimeout, StopTimeout: o.stopTimeout,
		ProgressTimeout: o.progressTimeout, Fault: fault,
	}, nil
}

// SelectedControllers returns the controllers `run --config file` runs
// with no other flag: deploy/'s tests check that each deployment's
// ServiceAccount is bound to the roles of exactly these.
func SelectedControllers(file string) ([]string, error) {
	o := newOptions()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	for _, s := range sections(o) {
		s.Register(fs)
	}
	if err := config.Apply(file, fs, defaultSections); err != nil {
		return nil, err
	}
	names, err := manager.ResolveControllers(o.controllers, controllers.Names)
	if err != nil {
		return nil, err
	}
	return o.config.Select(names, o.controllers), nil
}
