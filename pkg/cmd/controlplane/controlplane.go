// Package controlplane implements `nodeshepherd controlplane`.
package controlplane

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	cp "github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
)

// NewCommand returns `nodeshepherd controlplane`.
func NewCommand() *cobra.Command {
	c := cli.Group(&cobra.Command{
		Use:   "controlplane",
		Short: "Run a real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)",
	})
	c.AddCommand(newUpCommand())
	return c
}

type upOptions struct {
	dir           string
	binDir        string
	kcm           bool
	controllers   string
	scheduler     bool
	readyTimeout  time.Duration
	kcmArgs       []string
	schedulerArgs []string
}

func newUpCommand() *cobra.Command {
	o := &upOptions{}
	c := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane and keep it running until interrupted",
		Long: `Start etcd and kube-apiserver on free loopback ports, with generated certificates and
service-account keys, RBAC and the default admission plugins; optionally
kube-controller-manager (by default without the controllers nodeshepherd replaces) and
kube-scheduler. Prints the admin kubeconfig's path once /readyz answers, then runs until
Ctrl-C or SIGTERM, and stops every component on exit.

The binaries come from 'make controlplane' (bin/ of the repository).`,
		Example: `  nodeshepherd controlplane up --scheduler
  nodeshepherd controlplane up --controllers='*' --scheduler   # kube-controller-manager with all its controllers`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.readyTimeout <= 0 {
				return cli.Usagef("--ready-timeout must be positive, got %v", o.readyTimeout)
			}
			ctx := cmd.Context()
			plane, err := cp.Start(ctx, cp.Config{
				Dir: o.dir, BinDir: o.binDir,
				ControllerManager: o.kcm, Controllers: o.controllers, ControllerManagerArgs: o.kcmArgs,
				Scheduler: o.scheduler, SchedulerArgs: o.schedulerArgs, ReadyTimeout: o.readyTimeout,
			})
			if err != nil {
				return err
			}
			defer plane.Stop()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Control plane ready at %s\n", plane.Server())
			fmt.Fprintf(out, "  export KUBECONFIG=%s\n", plane.KubeconfigPath())
			fmt.Fprintf(out, "  logs: %s/logs\n", plane.Dir())
			fmt.Fprintln(out, "Press Ctrl-C to stop.")
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					klog.FromContext(ctx).Info("Stopping the control plane")
					return nil
				case <-tick.C:
					if name := plane.Exited(); name != "" {
						return fmt.Errorf("%s exited unexpectedly; see %s/logs/%s.log", name, plane.Dir(), name)
					}
				}
			}
		},
	}
	f := c.Flags()
	f.StringVar(&o.dir, "dir", "", "Directory for certificates, kubeconfigs, etcd data and logs (default: a temporary directory removed on exit).")
	f.StringVar(&o.binDir, "bin-dir", "", "Directory holding etcd, kube-apiserver, kube-controller-manager and kube-scheduler (default: $NODESHEPHERD_BIN_DIR, the executable's directory, or ./bin).")
	f.BoolVar(&o.kcm, "controller-manager", true, "Start kube-controller-manager.")
	f.StringVar(&o.controllers, "controllers", cp.DefaultControllers, "kube-controller-manager's --controllers list.")
	f.StringSliceVar(&o.kcmArgs, "controller-manager-arg", nil, "Extra kube-controller-manager flag, e.g. --controller-manager-arg=--node-monitor-grace-period=20s (repeatable).")
	f.BoolVar(&o.scheduler, "scheduler", false, "Start kube-scheduler.")
	f.StringSliceVar(&o.schedulerArgs, "scheduler-arg", nil, "Extra kube-scheduler flag (repeatable).")
	f.DurationVar(&o.readyTimeout, "ready-timeout", 60*time.Second, "How long to wait for every component to become ready.")
	return c
}
