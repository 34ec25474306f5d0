package scenario

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
)

type snapshotOptions struct {
	kube          cli.KubeFlags
	output        string
	name          string
	scale         float64
	maxNodes      int
	namespaces    []string
	includeSystem bool
	nsNamespace   string
	config        string
	force         bool
}

func newSnapshotCommand() *cobra.Command {
	o := &snapshotOptions{}
	c := &cobra.Command{
		Use:   "snapshot -o DIR|FILE.yaml",
		Short: "Write a scenario file from a live cluster: its nodes, workloads, PriorityClasses and nodeshepherd's settings",
		Long: `Read a live cluster and write a scenario that 'nodeshepherd simulate' runs on fake nodes:

  - nodes, grouped per zone by allocatable cpu, memory and pods, labels and lasting taints
    (cluster.nodeGroups; per-node labels such as kubernetes.io/hostname and the taints of the
    moment, node.kubernetes.io/*, are left out);
  - the nodes' DRA devices, from their ResourceSlices, per driver (cluster.devices; a DeviceClass
    selecting device.driver == DRIVER becomes its class), so that the fake nodes publish the same;
  - Deployments, StatefulSets and DaemonSets with their pod templates' requests, affinities,
    tolerations, nodeSelector, priorityClassName and topologySpreadConstraints; their
    PodDisruptionBudgets and ResourceClaimTemplates; PriorityClasses but system-*;
  - nodeshepherd's settings (--config, or the nodeshepherd-config ConfigMap of
    --nodeshepherd-namespace) as the scenario's controllers: block.

Never Secrets or ConfigMap data: env values and references, envFrom, command lines, probes,
imagePullSecrets, and Secret, ConfigMap, projected and claim volumes (replaced by emptyDir) are
removed; annotations and status too. The file's header and the summary list the changes that
name a Secret, a ConfigMap or a claim.

-o DIR writes DIR/scenario.yaml and DIR/workloads/*.yaml; -o FILE.yaml writes the scenario there
and workloads/ next to it. The timeline is a placeholder that runs as is (one node's network
blips): edit it, then rehearse with 'nodeshepherd simulate'. kube-system and the nodeshepherd
namespace are skipped unless --include-system. --scale or --max-nodes shrink the cluster.
Reads only; needs list on nodes, workloads, PDBs, PriorityClasses, ResourceSlices, DeviceClasses,
ResourceClaimTemplates and ConfigMaps of the nodeshepherd namespace.`,
		Example: `  nodeshepherd scenario snapshot -o my-cluster/ --max-nodes 30
  nodeshepherd scenario snapshot --context prod -o prod.yaml --scale 0.1 --namespace shop,payments
  nodeshepherd simulate my-cluster/scenario.yaml --compare upstream`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := c.Flags()
	o.kube.AddFlags(f, 20, 40)
	f.StringVarP(&o.output, "output", "o", "", "Where to write: a directory (scenario.yaml and workloads/ in it) or a .yaml file (workloads/ next to it). Required.")
	f.StringVar(&o.name, "name", "", "The scenario's name (its report directory's name); default: the output's name.")
	f.Float64Var(&o.scale, "scale", 1, "Multiply node counts, replicas and PDBs' whole numbers by this (0 < scale <= 1), rounded to the nearest, at least 1.")
	f.IntVar(&o.maxNodes, "max-nodes", 0, "At most this many nodes: scale counts down when the cluster has more (0: no cap).")
	f.StringSliceVar(&o.namespaces, "namespace", nil, "Only the workloads of these namespaces (comma-separated; default: every namespace but kube-system and the nodeshepherd namespace).")
	f.BoolVar(&o.includeSystem, "include-system", false, "Include kube-system's and the nodeshepherd namespace's workloads.")
	f.StringVar(&o.nsNamespace, "nodeshepherd-namespace", simulate.DefaultNodeShepherdNamespace, "The namespace nodeshepherd runs in: its settings are read from its nodeshepherd-config ConfigMap there.")
	f.StringVar(&o.config, "config", "", "nodeshepherd's configuration file (NodeShepherdConfiguration) to take the settings from instead of the cluster's ConfigMap.")
	f.BoolVar(&o.force, "force", false, "Replace an existing scenario file and the YAML files of its workloads/.")
	return c
}

func (o *snapshotOptions) run(cmd *cobra.Command) error {
	switch {
	case o.output == "":
		return cli.Usagef("-o is required: a directory, or a .yaml file for the scenario")
	case !(o.scale > 0 && o.scale <= 1) || math.IsNaN(o.scale):
		return cli.Usagef("--scale must be greater than 0 and at most 1 (0.1 keeps a tenth), got %g", o.scale)
	case o.maxNodes < 0:
		return cli.Usagef("--max-nodes must not be negative, got %d", o.maxNodes)
	}
	if err := o.kube.Validate(); err != nil {
		return err
	}
	if o.name == "" {
		o.name = defaultName(o.output)
	}
	if !simulate.ValidScenarioName(o.name) {
		return cli.Usagef("--name %q: lowercase letters, digits, '-', '.' or '_', starting and ending with a letter or digit, at most 63 characters", o.name)
	}
	opts := simulate.SnapshotOptions{Scale: o.scale, MaxNodes: o.maxNodes, Namespaces: o.namespaces,
		IncludeSystem: o.includeSystem, NodeShepherdNamespace: o.nsNamespace}
	if o.config != "" {
		data, err := os.ReadFile(o.config)
		if err != nil {
			return cli.Usagef("--config: %v", err)
		}
		opts.Config, opts.ConfigPath = data, o.config
	}
	cfg, err := o.kube.RESTConfig("nodeshepherd-scenario-snapshot")
	if err != nil {
		return err
	}
	// An unreachable server is an error within a minute, not a hang.
	cfg.Timeout = time.Minute
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Check the output before reading the cluster: a big cluster takes a while.
	cleanup, err := simulate.PrepareOutput(o.output, o.force)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	written := false
	defer func() {
		if !written {
			cleanup()
		}
	}()
	snap, err := simulate.TakeSnapshot(cmd.Context(), client, opts)
	if sErr := (*simulate.SettingsError)(nil); errors.As(err, &sErr) && o.config != "" {
		return cli.Usagef("--config: %v", sErr)
	}
	if nsErr := (*simulate.NamespaceError)(nil); errors.As(err, &nsErr) {
		return cli.Usagef("--namespace: %v (kubectl get namespaces lists them)", nsErr)
	}
	if err != nil {
		return fmt.Errorf("reading the cluster at %s: %w (check --kubeconfig and --context, and that the cluster is reachable)", cfg.Host, err)
	}
	nodes, replicas := snap.Size()
	if nodes > simulate.MaxNodes {
		return cli.Usagef("the scenario would have %d nodes, more than simulate's limit of %d: pass --max-nodes or --scale", nodes, simulate.MaxNodes)
	}
	if replicas > simulate.MaxPods {
		return cli.Usagef("the scenario would have %d replicas, more than simulate's limit of %d pods: pass --scale or --namespace", replicas, simulate.MaxPods)
	}
	path, files, err := snap.Write(o.output, o.name, o.source(cfg.Host), o.force)
	if errors.Is(err, simulate.ErrOutputExists) {
		return &cli.UsageError{Err: err}
	}
	if err != nil {
		return fmt.Errorf("writing the scenario: %w", err)
	}
	written = true
	out := cmd.OutOrStdout()
	snap.PrintSummary(out)
	// What was written must run: load it as simulate will.
	if _, err := simulate.Load(path); err != nil {
		return fmt.Errorf("the scenario written does not load (a bug; please report it with the file): %w", err)
	}
	fmt.Fprintf(out, "Wrote %s and %d workload files in %s.\nEdit its timeline, then: nodeshepherd simulate %s --compare upstream\n",
		path, len(files), filepath.Dir(path)+string(filepath.Separator)+"workloads", path)
	return nil
}

var notInName = regexp.MustCompile(`[^a-z0-9._-]+`)

// defaultName names the scenario after -o: prod/ and prod.yaml are "prod",
// prod/scenario.yaml too.
func defaultName(output string) string {
	clean := filepath.Clean(output)
	base := filepath.Base(clean)
	if ext := strings.ToLower(filepath.Ext(base)); ext == ".yaml" || ext == ".yml" {
		base = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if base == "scenario" {
		base = filepath.Base(filepath.Dir(clean))
	}
	name := strings.Trim(notInName.ReplaceAllString(strings.ToLower(base), "-"), "-._")
	if len(name) > 63 {
		name = strings.Trim(name[:63], "-._")
	}
	if !simulate.ValidScenarioName(name) {
		return "cluster-snapshot"
	}
	return name
}

// source names the cluster in the file: the kubeconfig context and server.
func (o *snapshotOptions) source(host string) string {
	ctx := o.kube.Context
	if ctx == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = o.kube.Kubeconfig
		if raw, err := rules.Load(); err == nil {
			ctx = raw.CurrentContext
		}
	}
	if ctx == "" {
		return "cluster " + host
	}
	return fmt.Sprintf("context %s (%s)", ctx, host)
}
