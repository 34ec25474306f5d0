package fakenodes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

type faultOptions struct {
	socket          string
	target          fakenode.Target
	duration        time.Duration
	reason, message string
	survivesReboot  bool
}

func newFaultCommand() *cobra.Command {
	o := &faultOptions{}
	c := &cobra.Command{
		Use:   "fault ACTION [CONDITION]",
		Short: "Inject a fault into a running fakenodes process",
		Long: `Inject a fault into the nodes of a running 'nodeshepherd fakenodes' process.

Actions:
  partition              cut all API traffic of the nodes (no lease, no status, no pod updates)
  heal                   end a partition (heard again when its request in flight gets through)
  kubelet-stop           stop the nodes' kubelets
  kubelet-start          start them again (a fresh kubelet re-posts every pod status)
  condition TYPE=STATUS  set a node condition, e.g. KernelDeadlock=True or MemoryPressure=True;
                         a reboot of the machine clears it, unless --survives-reboot
  clear-condition TYPE   return a condition to its healthy status
  machine-delete         delete the machine: the kubelet stops for good and the fake cloud
                         provider (nodeshepherd run --cloud-provider=fake) reports it gone
  machine-shutdown       power the machine off: kubelet stopped, reported shut down
  machine-start          power it on again: the kubelet starts with a new boot ID (and
                         re-registers its Node)

Select nodes with --node, --zone, --selector or --all (several intersect). With --for the
fault is undone after that long (partition, kubelet-stop, condition, machine-shutdown).

A machine that boots again (machine-start after machine-shutdown, or a reboot by the fake
cloud provider) reports every condition a fault set back at its healthy status, as a fresh
kubelet and node-problem-detector would; --survives-reboot keeps one through reboots (a
hardware fault). A replaced machine (a new Node) has none of them.`,
		Example: `  nodeshepherd fakenodes fault partition --node=fake-node-0003 --for=45s
  nodeshepherd fakenodes fault partition --zone=zone-b
  nodeshepherd fakenodes fault condition KernelDeadlock=True --selector=pool=blue --for=10m
  nodeshepherd fakenodes fault condition KernelDeadlock=True --node=fake-node-0001 --survives-reboot
  nodeshepherd fakenodes fault clear-condition KernelDeadlock --all`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.fault(args)
			if err != nil {
				return &cli.UsageError{Err: err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			nodes, err := fakenode.NewControlClient(o.socket).Apply(ctx, f)
			var fe *fakenode.FaultError
			if errors.As(err, &fe) {
				return &cli.UsageError{Err: err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d node(s): %s\n", f, len(nodes), summarize(nodes))
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.socket, "control-socket", fakenode.DefaultControlSocket(), "Control socket of the fakenodes process.")
	fl.StringSliceVar(&o.target.Nodes, "node", nil, "Node name (repeatable, or comma-separated).")
	fl.StringVar(&o.target.Zone, "zone", "", "Every node of this zone.")
	fl.StringVar(&o.target.Selector, "selector", "", "Nodes matching this label selector.")
	fl.BoolVar(&o.target.All, "all", false, "Every node.")
	fl.DurationVar(&o.duration, "for", 0, "Undo the fault after this long (e.g. 45s, 10m).")
	fl.StringVar(&o.reason, "reason", "", "Reason of the condition (condition and clear-condition).")
	fl.StringVar(&o.message, "message", "", "Message of the condition (condition and clear-condition).")
	fl.BoolVar(&o.survivesReboot, "survives-reboot", false, "With condition: the condition stays through reboots of the machine; only clear-condition, --for or a replaced machine ends it.")
	return c
}

func (o *faultOptions) fault(args []string) (fakenode.Fault, error) {
	f := fakenode.Fault{Action: fakenode.Action(args[0]), Target: o.target, Duration: o.duration}
	switch f.Action {
	case fakenode.SetCondition, fakenode.ClearCondition:
		if len(args) != 2 {
			return f, fmt.Errorf("%s needs a condition argument, e.g. 'fault %s KernelDeadlock%s'", f.Action, f.Action,
				map[bool]string{true: "=True"}[f.Action == fakenode.SetCondition])
		}
		cond, err := fakenode.ParseCondition(args[1], f.Action == fakenode.SetCondition)
		if err != nil {
			return f, err
		}
		cond.Reason, cond.Message = o.reason, o.message
		f.Condition = cond
		if o.survivesReboot && f.Action != fakenode.SetCondition {
			return f, fmt.Errorf("--survives-reboot is for condition (how long a condition being set lasts), not %s", f.Action)
		}
		cond.SurvivesReboot = o.survivesReboot
	default:
		if len(args) == 2 {
			return f, fmt.Errorf("%s takes no argument, got %q", f.Action, args[1])
		}
		if o.survivesReboot {
			return f, fmt.Errorf("--survives-reboot is for condition, not %s", f.Action)
		}
	}
	return f, f.Validate()
}

func summarize(nodes []string) string {
	if len(nodes) <= 6 {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s, … %s", strings.Join(nodes[:3], ", "), nodes[len(nodes)-1])
}
