package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

func TestBadInputExitsWithCode2(t *testing.T) {
	bin := framework.Binary(t)
	socket := filepath.Join(t.TempDir(), "none.sock")
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\nconditions:\n- type: KernelDeadlock\n  minDurationn: 10m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := os.WriteFile(scenario, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 5m\ncluster:\n  zones: [{name: a, nodes: 1}]\ntimeline:\n- {at: 1m, action: partition, zone: b}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	oldScenario := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(oldScenario, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\ncontrollers:\n  node-monitor-grace-period: 40s\nduration: 5m\ncluster:\n  zones: [{name: a, nodes: 1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badConfig := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(badConfig, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\nnodeLifecycle:\n  nodeMonitorGracePeriod: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string // part of the error message
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"run", "--config=" + badConfig}, badConfig + `:4: nodeLifecycle.nodeMonitorGracePeriod: invalid argument "soon"`},
		{[]string{"simulate", oldScenario, "--validate"}, oldScenario + ":4: controllers.node-monitor-grace-period is the old spelling; write nodeLifecycle.nodeMonitorGracePeriod"},
		{[]string{"run", "--config=/nonexistent.yaml"}, "--config: open /nonexistent.yaml"},
		{[]string{"config", "bogus"}, `unknown command "bogus"`},
		{[]string{"simulate"}, "simulate takes one scenario file, got 0 arguments"},
		{[]string{"simulate", scenario, "--time-scale=0"}, "--time-scale must be between 1 and 100, got 0"},
		{[]string{"simulate", scenario, "--compare=kcm"}, `--compare: only upstream is supported, got "kcm"`},
		{[]string{"simulate", scenario}, scenario + `:7: timeline[0] (partition): unknown zone "b"; the cluster's zones: a`},
		{[]string{"simulate", "/nonexistent/scenario.yaml"}, "/nonexistent/scenario.yaml: no such file"},
		{[]string{"controlplane", "bogus"}, `unknown command "bogus"`},
		{[]string{"fakenodes", "--nodes=-1"}, "--nodes must be at least 1"},
		{[]string{"hollownodes", "--nodes=0"}, "--nodes must be at least 1, got 0"},
		{[]string{"hollownodes", "--name-prefix=Bad_"}, `--name-prefix "Bad_" does not make valid node names`},
		{[]string{"fakenodes", "--nodes=abc"}, `invalid argument "abc"`},
		{[]string{"fakenodes", "--zones=zone-a,,zone-b"}, "empty zone name"},
		{[]string{"fakenodes", "--zones=zone-a=x"}, `count "x" of zone "zone-a"`},
		{[]string{"fakenodes", "--zones=Zone A"}, "not a valid zone label value"},
		{[]string{"fakenodes", "--nodes=5", "--zones=a=1,b=2"}, "add up to 3 but 5 nodes"},
		{[]string{"fakenodes", "--node-lease-renew-interval=abc"}, `invalid argument "abc"`},
		{[]string{"fakenodes", "--node-lease-renew-interval=-1s"}, "node lease renew interval must be positive"},
		{[]string{"fakenodes", "--node-lease-renew-interval=50s"}, "must be shorter than the lease duration"},
		{[]string{"fakenodes", "--register-with-taints=a=b:Sometimes"}, "must be NoSchedule, PreferNoSchedule or NoExecute"},
		{[]string{"fakenodes", "--devices=gpu.example.com=0"}, `--devices: devices "gpu.example.com=0": count 0 must be from 1 to 128`},
		{[]string{"fakenodes", "--devices=gpu.example.com=1,colour=red"}, `unknown key "colour"; the keys are model, memory and class`},
		{[]string{"fakenodes", "--cpu=lots"}, `--cpu "lots"`},
		{[]string{"fakenodes", "--kube-api-qps=0"}, "--kube-api-qps must be greater than 0"},
		{[]string{"fakenodes", "fault", "explode", "--all", "--control-socket", socket}, `unknown fault action "explode"`},
		{[]string{"fakenodes", "fault", "partition", "--control-socket", socket}, "no target"},
		{[]string{"fakenodes", "fault", "condition", "KernelDeadlock", "--all", "--control-socket", socket}, "expected TYPE=STATUS"},
		{[]string{"fakenodes", "fault", "condition", "KernelDeadlock=Maybe", "--all", "--control-socket", socket}, "must be True, False or Unknown"},
		{[]string{"fakenodes", "fault", "heal", "--all", "--for=10s", "--control-socket", socket}, "heal takes no duration"},
		{[]string{"fakenodes", "fault", "partition", "--selector=a in (", "--control-socket", socket}, "invalid label selector"},
		{[]string{"fakenodes", "fault", "partition", "--all", "--for=-5s", "--control-socket", socket}, "must not be negative"},
		{[]string{"controlplane", "up", "--ready-timeout=0s"}, "--ready-timeout must be positive"},
		{[]string{"run", "--node-eviction-rate=-1"}, "--node-eviction-rate must not be negative"},
		{[]string{"run", "--secondary-node-eviction-rate=-0.5"}, "--secondary-node-eviction-rate must not be negative"},
		{[]string{"run", "--unhealthy-zone-threshold=0"}, "--unhealthy-zone-threshold must be in (0, 1]"},
		{[]string{"run", "--unhealthy-zone-threshold=1.5"}, "--unhealthy-zone-threshold must be in (0, 1]"},
		{[]string{"run", "--node-monitor-grace-period=3s", "--node-monitor-period=5s"}, "must be longer than --node-monitor-period"},
		{[]string{"run", "--controllers=nodelifecycle,bogus"}, `unknown controller "bogus"`},
		{[]string{"run", "--controllers=-nodelifecycle,-tainteviction"}, "selects no controller"},
		{[]string{"run", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"}, "must be longer than --leader-elect-renew-deadline"},
		{[]string{"run", "--node-monitor-period=abc"}, `invalid argument "abc"`},
		{[]string{"run", "--controllers=nodeipam"}, "needs --allocate-node-cidrs=true"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/33"}, `"10.244.0.0/33" is not a valid CIDR`},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.1.0/16"}, "has host bits set"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=8"}, "is smaller than the cluster CIDR"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=40"}, "is too large for IPv4"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=fd00::/48", "--node-cidr-mask-size=120"}, "at most 2^16 are supported"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16,10.245.0.0/16"}, "one IPv4 and one IPv6 CIDR"},
		{[]string{"run", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16", "--service-cluster-ip-range=10.96.0.0"}, "--service-cluster-ip-range"},
		{[]string{"run", "--controllers=cloudnodelifecycle"}, "needs --cloud-provider"},
		{[]string{"run", "--cloud-provider=aws"}, `unknown --cloud-provider "aws"`},
		{[]string{"run", "--cloud-provider=webhook"}, "must be an absolute https:// URL"},
		{[]string{"run", "--cloud-provider=webhook", "--cloud-provider-webhook-url=ftp://infra/x"}, "must be an absolute https:// URL"},
		{[]string{"run", "--cloud-provider=webhook", "--cloud-provider-webhook-url=https://infra/x", "--cloud-provider-webhook-ca-file=/nonexistent/ca.pem"}, "--cloud-provider-webhook-ca-file"},
		{[]string{"run", "--cloud-provider=webhook", "--cloud-provider-webhook-url=https://infra/x", "--cloud-provider-webhook-ca-file=/etc/hostname"}, "holds no PEM certificate"},
		{[]string{"run", "--cloud-provider=fake", "--node-deletion-rate=0"}, "--node-deletion-rate must be positive"},
		{[]string{"run", "--cloud-provider=fake", "--max-unhealthy-nodes=150%"}, "--max-unhealthy-nodes"},
		{[]string{"fakenodes", "fault", "machine-delete", "--all", "--for=1m", "--control-socket", socket}, "machine-delete takes no duration"},
		{[]string{"run", "--controllers=drain"}, "the drain controller needs --drain-condition"}, // idle: no rule, no remediation
		{[]string{"run", "--drain-condition=KernelDeadlock=True,tenminutes"}, `"tenminutes" is not a duration`},
		{[]string{"run", "--drain-condition=KernelDeadlock=Maybe"}, `status "Maybe" must be True, False or Unknown`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-node-selector=pool in (a"}, `label selector "pool in (a"`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-node-expression=node.metadata.labels["}, "CEL expression"},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-node-expression=size(node.metadata.labels)"}, "must give a bool"},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--max-cordoned-nodes=120%"}, `--max-cordoned-nodes: "120%" is not a percentage between 0% and 100%`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--max-unhealthy-nodes=101%"}, "--max-unhealthy-nodes"},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--max-concurrent-drains=-1"}, "--max-concurrent-drains must not be negative"},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-timeout=0s"}, "--drain-timeout must be positive"},
		{[]string{"run", "--drain-rules=" + rulesFile}, rulesFile + ":5: field minDurationn not found"},
		{[]string{"run", "--drain-condition=KernelDeadlock=True,10m,force-after=soon"}, `--drain-condition: condition "KernelDeadlock=True,10m,force-after=soon": force-after "soon" is not a positive duration`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-window=Mon-Fry 22:00-06:00"}, `--drain-window/--drain-window-time-zone: window "Mon-Fry 22:00-06:00": "Fry" is not a day`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-window=* 01:00-02:00", "--drain-window-time-zone=Mars/Olympus"}, `time zone "Mars/Olympus"`},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-force-after=-1s"}, "--drain-force-after must not be negative"},
		{[]string{"run", "--drain-condition=KernelDeadlock", "--drain-force-after=10s"}, "--drain-force-after 10s is below the least force-after, 1m0s"},
		{[]string{"run", "--drain-condition=KernelDeadlock=True,10m,force-after=5s"}, `--drain-condition: condition "KernelDeadlock=True,10m,force-after=5s": force-after 5s is below the least force-after, 1m0s`},
		{[]string{"run", "--controllers=scheduler", "--scheduler-parallelism=0"}, "--scheduler-parallelism must be at least 1, got 0"},
		{[]string{"run", "--controllers=scheduler", "--percentage-of-nodes-to-score=101"}, "--percentage-of-nodes-to-score must be in [0, 100], got 101"},
		{[]string{"run", "--controllers=scheduler", "--min-candidate-nodes-percentage=0", "--min-candidate-nodes-absolute=0"}, "cannot both be zero"},
		{[]string{"run", "--controllers=scheduler", "--pod-initial-backoff=20s"}, "--pod-initial-backoff (20s) must be positive and not above --pod-max-backoff (10s)"},
		{[]string{"run", "--controllers=scheduler", "--scheduler-name="}, "--scheduler-name must not be empty"},
		{[]string{"run", "--controllers=scheduler", "--default-pod-topology-spread=zone:0"}, `--default-pod-topology-spread item 1 ("zone:0"): maxSkew "0" must be a whole number of at least 1`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stderr := run(t, bin, tc.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", stderr, tc.want)
			}
		})
	}
}

func TestRuntimeErrorsExitWithCode1(t *testing.T) {
	bin := framework.Binary(t)
	t.Run("fault without a running process", func(t *testing.T) {
		code, stderr := run(t, bin, "fakenodes", "fault", "partition", "--all", "--control-socket", filepath.Join(t.TempDir(), "none.sock"))
		if code != 1 || !strings.Contains(stderr, "cannot reach the fakenodes process") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("missing control-plane binaries name the make target", func(t *testing.T) {
		code, stderr := run(t, bin, "controlplane", "up", "--bin-dir", t.TempDir())
		if code != 1 || !strings.Contains(stderr, "make controlplane") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

func TestHelpIsAvailableForEveryCommand(t *testing.T) {
	bin := framework.Binary(t)
	for _, args := range [][]string{{}, {"version"}, {"controlplane"}, {"controlplane", "up"}, {"fakenodes"}, {"fakenodes", "fault"}, {"fakenodes", "status"}, {"demo"}, {"run"}, {"explain"}, {"explain", "node"}, {"explain", "pod"}, {"scenario"}, {"scenario", "snapshot"}} {
		code, stderr := run(t, bin, append(args, "--help")...)
		if code != 0 {
			t.Errorf("%v --help: exit %d: %s", args, code, stderr)
		}
	}
}

func run(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := framework.RunBinary(t, bin, args...)
	return code, stderr
}
