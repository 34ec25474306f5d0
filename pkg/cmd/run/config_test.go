package run

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/config"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultConfigRoundTrips(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDefaultConfig(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"kind: NodeShepherdConfiguration", "nodeLifecycle:", "  nodeMonitorGracePeriod: 50s",
		"  nodeEvictionRate: 0.1", "  leaderElect: true", "  maxCordonedNodes: 10%", "  schedulerName: nodeshepherd-scheduler",
		"  # How long a node may go without a heartbeat", "shared:\n", "  maxUnhealthyNodes: 45%"} {
		if !strings.Contains(text, want) {
			t.Errorf("default config lacks %q", want)
		}
	}
	o := newOptions()
	fs := newCommand(o).Flags()
	if err := config.Apply(writeFile(t, text), fs, defaultSections); err != nil {
		t.Fatalf("the default does not load: %v", err)
	}
	if _, err := o.validate(); err != nil {
		t.Fatalf("the default does not validate: %v", err)
	}
	if o.config.NodeLifecycle != newOptions().config.NodeLifecycle || o.config.Shared != newOptions().config.Shared || o.leader != newOptions().leader {
		t.Error("loading the default changed settings")
	}
}

func TestConfigFileAndFlagOverride(t *testing.T) {
	p := writeFile(t, `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle, tainteviction, drain]
nodeLifecycle:
  nodeMonitorGracePeriod: 40s
  nodeEvictionRate: 0.5
drain:
  drainCondition: ["KernelDeadlock=True,10m", "Ready=Unknown,30m"]
  maxConcurrentDrains: 2
shared:
  maxUnhealthyNodes: "3"
leaderElection:
  leaderElectResourceNamespace: nodeshepherd-system
`)
	o := newOptions()
	cmd := newCommand(o)
	if err := cmd.Flags().Parse([]string{"--node-eviction-rate=0.2"}); err != nil {
		t.Fatal(err)
	}
	if err := config.Apply(p, cmd.Flags(), defaultSections); err != nil {
		t.Fatal(err)
	}
	opts, err := o.validate()
	if err != nil {
		t.Fatal(err)
	}
	if o.config.NodeLifecycle.NodeMonitorGracePeriod != 40*time.Second {
		t.Errorf("grace period %v, want the file's 40s", o.config.NodeLifecycle.NodeMonitorGracePeriod)
	}
	if o.config.NodeLifecycle.NodeEvictionRate != 0.2 {
		t.Errorf("eviction rate %v, want the flag's 0.2 over the file's 0.5", o.config.NodeLifecycle.NodeEvictionRate)
	}
	if got := o.config.Drain.Conditions; len(got) != 2 || got[1] != "Ready=Unknown,30m" {
		t.Errorf("drain conditions %v", got)
	}
	if o.config.Shared.MaxUnhealthyNodes != "3" {
		t.Errorf("shared maxUnhealthyNodes %q, want the file's 3", o.config.Shared.MaxUnhealthyNodes)
	}
	if strings.Join(opts.Controllers, ",") != "nodelifecycle,tainteviction,drain" || o.leader.ResourceNamespace != "nodeshepherd-system" {
		t.Errorf("controllers %v, lease namespace %q", opts.Controllers, o.leader.ResourceNamespace)
	}
}

func TestBadConfigFiles(t *testing.T) {
	head := "apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\n"
	cases := []struct{ name, text, want string }{
		{"wrong kind", "apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\n", ":1: expected apiVersion: nodeshepherd.io/v1alpha1 and kind: NodeShepherdConfiguration"},
		{"unknown section", head + "nodelifecycle:\n  nodeMonitorPeriod: 5s\n", `:3: unknown section "nodelifecycle"; sections: clientConnection, manager`},
		{"unknown setting", head + "nodeLifecycle:\n  nodeMonitorGracePeriodd: 5s\n", ":4: unknown setting nodeLifecycle.nodeMonitorGracePeriodd; the section's settings: nodeMonitorGracePeriod,"},
		{"setting in the wrong section", head + "drain:\n  nodeMonitorGracePeriod: 5s\n", ":4: unknown setting drain.nodeMonitorGracePeriod; it belongs to section nodeLifecycle: write nodeLifecycle.nodeMonitorGracePeriod"},
		{"setting moved to the shared section", head + "nodeLifecycle:\n  nodeMonitorPeriod: 5s\n", ":4: unknown setting nodeLifecycle.nodeMonitorPeriod; it belongs to section shared: write shared.nodeMonitorPeriod"},
		{"max-unhealthy-nodes moved too", head + "cloudNodeLifecycle:\n  maxUnhealthyNodes: 3\n", ":4: unknown setting cloudNodeLifecycle.maxUnhealthyNodes; it belongs to section shared: write shared.maxUnhealthyNodes"},
		{"flag name as key", head + "nodeLifecycle:\n  node-monitor-grace-period: 5s\n", ":4: nodeLifecycle.node-monitor-grace-period is the old spelling; write nodeLifecycle.nodeMonitorGracePeriod"},
		{"setting without its section", head + "nodeMonitorGracePeriod: 5s\n", ":3: nodeMonitorGracePeriod is a setting, not a section; write nodeLifecycle.nodeMonitorGracePeriod"},
		{"bad duration", head + "nodeLifecycle:\n  nodeMonitorGracePeriod: fast\n", `:4: nodeLifecycle.nodeMonitorGracePeriod: invalid argument "fast"`},
		{"list for a scalar", head + "shared:\n  nodeMonitorPeriod: [5s, 6s]\n", ":4: shared.nodeMonitorPeriod takes one value, got a list"},
		{"twice", head + "drain:\n  skipDrain: true\n  skipDrain: false\n", ":5: drain.skipDrain is given twice"},
		{"not a mapping", head + "drain: true\n", ":3: drain: expected a mapping of settings"},
		{"grace not above the shared period", head + "shared:\n  nodeMonitorPeriod: 1m\n", "--node-monitor-grace-period (50s) must be longer than --node-monitor-period (1m0s)"},
		{"invalid value caught by validation", head + "shared:\n  unhealthyZoneThreshold: 1.5\n", "--unhealthy-zone-threshold must be in (0, 1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, c.text)
			o := newOptions()
			cmd := newCommand(o)
			err := config.Apply(p, cmd.Flags(), defaultSections)
			if err == nil {
				_, err = o.validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if cli.ExitCode(&cli.UsageError{Err: err}) != 2 {
				t.Error("not a usage error")
			}
		})
	}
	// Nothing is half-applied: a file with one good and one bad value changes nothing.
	o := newOptions()
	cmd := newCommand(o)
	p := writeFile(t, head+"nodeLifecycle:\n  nodeMonitorGracePeriod: 40s\nshared:\n  nodeMonitorPeriod: fast\n")
	if err := config.Apply(p, cmd.Flags(), defaultSections); err == nil {
		t.Fatal("no error")
	}
	if o.config.NodeLifecycle.NodeMonitorGracePeriod != 50*time.Second {
		t.Errorf("half-applied: grace period %v", o.config.NodeLifecycle.NodeMonitorGracePeriod)
	}
}

// run --help lists the registry's controllers in their layout and derives
// the kube-controller-manager hint from what they replace.
func TestHelpFromRegistry(t *testing.T) {
	long := newCommand(newOptions()).Long
	for _, want := range []string{
		"Controllers:\n  nodelifecycle   node heartbeats, Unknown conditions,",
		"\n  cloudnodelifecycle\n                  asks --cloud-provider about nodes",
		"\n  scheduler       schedules the pods whose spec.schedulerName",
		"--controllers=*,-nodelifecycle,-taint-eviction-controller,-nodeipam next to it.",
	} {
		if !strings.Contains(long, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
}

// TestDangerousValuesRefused: numbers that strconv accepts but no setting
// means (NaN, Inf, negative) and a grace period that amounts to a force
// delete are refused, naming the flag; the grace period only with its opt-in.
func TestDangerousValuesRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" means valid
	}{
		{[]string{"--unhealthy-zone-threshold=NaN"}, "--unhealthy-zone-threshold must be in (0, 1]"},
		{[]string{"--node-eviction-rate=NaN"}, "--node-eviction-rate must not be negative, NaN or infinite"},
		{[]string{"--node-eviction-rate=+Inf"}, "--node-eviction-rate must not be negative, NaN or infinite"},
		{[]string{"--secondary-node-eviction-rate=-1"}, "--secondary-node-eviction-rate must not be negative, NaN or infinite"},
		{[]string{"--controllers=cloudnodelifecycle", "--cloud-provider=fake", "--node-deletion-rate=Inf"}, "--node-deletion-rate must be positive and finite"},
		{[]string{"--kube-api-qps=NaN"}, "--kube-api-qps must be greater than 0 and finite"},
		{[]string{"--kube-api-qps=Inf"}, "--kube-api-qps must be greater than 0 and finite"},
		{[]string{"--max-unhealthy-nodes=NaN%"}, "--max-unhealthy-nodes"},
		{[]string{"--max-unhealthy-nodes=101%"}, "--max-unhealthy-nodes"},
		{[]string{"--drain-condition=KernelDeadlock=True", "--max-grace-period=0s"}, "--max-grace-period 0s is under a second"},
		{[]string{"--drain-condition=KernelDeadlock=True", "--max-grace-period=500ms"}, "add --allow-zero-grace-period"},
		{[]string{"--drain-condition=KernelDeadlock=True", "--max-grace-period=0s", "--allow-zero-grace-period"}, ""},
		{[]string{"--drain-condition=KernelDeadlock=True", "--max-grace-period=1s"}, ""},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			o := newOptions()
			cmd := newCommand(o)
			if err := cmd.Flags().Parse(c.args); err != nil {
				t.Fatal(err)
			}
			_, err := o.validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// A bad KubeSchedulerConfiguration given to --kube-scheduler-config (on
// the command line or as scheduler.kubeSchedulerConfig in the
// configuration file) stops run with exit 2, naming the flag, the file,
// the line and the field; so does a --node-resources-fit-* flag next to it.
func TestKubeSchedulerConfigRefusedByRun(t *testing.T) {
	ks := filepath.Join(t.TempDir(), "kube-scheduler.yaml")
	if err := os.WriteFile(ks, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"+
		"- schedulerName: nodeshepherd-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy: {type: MostAlocated}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := "apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\n"
	for _, c := range []struct {
		name, file string
		args       []string
		want       string
	}{
		{"flag", "", []string{"--kube-scheduler-config=" + ks},
			"--kube-scheduler-config: " + ks + `:8: profiles[0].pluginConfig[0].args.scoringStrategy.type: unsupported value "MostAlocated"`},
		{"configuration file", head + "scheduler:\n  kubeSchedulerConfig: " + ks + "\n", nil, `args.scoringStrategy.type: unsupported value "MostAlocated"`},
		{"next to a fit flag", "", []string{"--kube-scheduler-config=" + ks, "--node-resources-fit-strategy=MostAllocated"},
			"--kube-scheduler-config gives NodeResourcesFit's args: leave out the --node-resources-fit-* flags"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOptions()
			cmd := newCommand(o)
			if err := cmd.Flags().Parse(append([]string{"--controllers=scheduler"}, c.args...)); err != nil {
				t.Fatal(err)
			}
			if c.file != "" {
				if err := config.Apply(writeFile(t, c.file), cmd.Flags(), defaultSections); err != nil {
					t.Fatal(err)
				}
			}
			_, err := o.validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if cli.ExitCode(err) != 2 {
				t.Errorf("exit code %d, want 2", cli.ExitCode(err))
			}
		})
	}
}
