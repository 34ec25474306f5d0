package simulate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// hollowScenario is a scenario hollow nodes can run: every timeline action
// they support.
const hollowScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: hollow
duration: 5m
controllers:
  nodeLifecycle: {nodeMonitorGracePeriod: 20s}
cluster:
  nodeKind: hollow
  zones:
  - {name: zone-a, nodes: 2}
  - {name: zone-b, nodes: 1}
  node: {maxPods: 30, labels: {pool: web}}
  kubelet: {leaseDuration: 40s, nodeStatusUpdateFrequency: 10s}
workloads:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    replicas: 3
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        containers: [{name: web, image: pause}]
timeline:
- {at: 10s, action: partition, nodes: [fake-node-0000], for: 30s}
- {at: 20s, action: network-blip, zone: zone-b, for: 10s}
- {at: 30s, action: partition, nodes: [fake-node-0001]}
- {at: 40s, action: heal, nodes: [fake-node-0001]}
- {at: 50s, action: kubelet-stop, nodes: [fake-node-0000], for: 10s}
- {at: 60s, action: kubelet-stop, nodes: [fake-node-0001]}
- {at: 70s, action: kubelet-start, nodes: [fake-node-0001]}
- {at: 80s, action: kubelet-restart, all: true}
- {at: 90s, action: set-condition, condition: KernelDeadlock=True, nodes: [fake-node-0002], for: 20s}
- {at: 2m, action: clear-condition, condition: KernelDeadlock, all: true}
- {at: 2m, action: cordon, zone: zone-a, for: 30s}
- {at: 3m, action: uncordon, zone: zone-a}
- {at: 3m10s, action: set-condition, condition: ReadonlyFilesystem=True, survivesReboot: true, nodes: [fake-node-0001]}
- {at: 3m20s, action: machine-shutdown, nodes: [fake-node-0000], for: 20s}
- {at: 3m30s, action: machine-shutdown, nodes: [fake-node-0001]}
- {at: 3m40s, action: machine-start, nodes: [fake-node-0001]}
- {at: 3m50s, action: machine-delete, nodes: [fake-node-0002]}
- {at: 4m, action: machine-start, nodes: [fake-node-0002]}
`

func TestHollowScenarioValid(t *testing.T) {
	sc, err := Load(writeScenario(t, hollowScenario))
	if err != nil {
		t.Fatal(err)
	}
	if sc.NodeKind() != NodeKindHollow {
		t.Errorf("node kind %q, want hollow", sc.NodeKind())
	}
	if err := sc.CheckNodes("", 1); err != nil {
		t.Errorf("at --time-scale 1: %v", err)
	}
	// The hollow nodes get the fake nodes' names, zones and labels.
	cfg, err := sc.hollowNodeConfig("/bin-dir")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range cfg.Specs {
		got = append(got, s.Name+"@"+s.Zone)
	}
	if want := "fake-node-0000@zone-a fake-node-0001@zone-a fake-node-0002@zone-b"; strings.Join(got, " ") != want {
		t.Errorf("hollow nodes %q, want %q", strings.Join(got, " "), want)
	}
	if cfg.Labels["pool"] != "web" || cfg.Labels["node.kubernetes.io/instance-type"] != "hollow" || cfg.MaxPods != 30 || cfg.Binary != "/bin-dir/kubemark" {
		t.Errorf("hollow config: labels %v, max pods %d, binary %q", cfg.Labels, cfg.MaxPods, cfg.Binary)
	}
}

// TestHollowScenarioRefusals: what hollow nodes cannot do yet is refused
// at its file:line with what is missing, both for cluster.nodeKind: hollow
// (Load) and for --nodes hollow on a fake scenario (CheckNodes).
func TestHollowScenarioRefusals(t *testing.T) {
	base := strings.Replace(hollowScenario, "  nodeKind: hollow\n", "", 1)
	// withStep adds a step to the timeline.
	withStep := func(step string) string { return base + step + "\n" }
	cases := []struct {
		name, text string
		at         string // the text of the line the error names
		want       string
		// fakeInvalid: the case is refused on fake nodes too (only
		// nodeKind: hollow is checked).
		fakeInvalid bool
	}{
		{"node groups", strings.Replace(base, `  zones:
  - {name: zone-a, nodes: 2}
  - {name: zone-b, nodes: 1}
`, `  nodeGroups:
  - {name: web, zone: zone-a, nodes: 2}
  - {name: db, zone: zone-b, nodes: 1}
`, 1), "  - {name: web, zone: zone-a, nodes: 2}", "cluster.nodeGroups on hollow nodes: not implemented", false},
		{"too many nodes", strings.Replace(base, "{name: zone-a, nodes: 2}", "{name: zone-a, nodes: 20}", 1),
			"  - {name: zone-a, nodes: 20}", "21 nodes on hollow nodes, more than the limit of 20", false},
		{"cpu", strings.Replace(base, "node: {maxPods: 30,", "node: {cpu: \"8\", maxPods: 30,", 1), "  node: {cpu: \"8\"", "cluster.node.cpu on hollow nodes: kubemark takes no capacity", false},
		{"lease duration", strings.Replace(base, "leaseDuration: 40s", "leaseDuration: 20s", 1), "  kubelet: {leaseDuration: 20s", "cluster.kubelet.leaseDuration 20s on hollow nodes: kubemark takes no flag for it: the hollow kubelet's is 40s", false},
		{"status report frequency", strings.Replace(base, "nodeStatusUpdateFrequency: 10s", "nodeStatusReportFrequency: 1m", 1), "  kubelet: {leaseDuration: 40s", "cluster.kubelet.nodeStatusReportFrequency 1m0s on hollow nodes", false},
		{"pod start delay", strings.Replace(base, "nodeStatusUpdateFrequency: 10s", "podStartDelay: 2s", 1), "  kubelet: {leaseDuration: 40s", "podStartDelay on hollow nodes: not implemented: kubemark's fake container runtime", false},
		{"stale pod status", strings.Replace(base, "nodeStatusUpdateFrequency: 10s", "emulateStalePodStatus: true", 1), "  kubelet: {leaseDuration: 40s", "cannot emulate the 1.15 kubelet of seed 002", false},
		// The outofservice controller runs on hollow nodes
		// (TestHollowOutOfServiceAccepted); a Fence step is refused.
		{"fence step", strings.Replace(base, "  nodeLifecycle: {nodeMonitorGracePeriod: 20s}\n", "  nodeLifecycle: {nodeMonitorGracePeriod: 20s}\n  outOfService: {outOfServiceAfter: 1m}\n", 1) + fencePolicy,
			"    - {action: Fence, timeout: 1m}", "RemediationPolicy web: spec.steps[0] (Fence) on hollow nodes: not implemented: its power-off and the out-of-service taint each run on hollow machines, but no test has run a Fence step on them yet", false},
		{"kubelet-owned condition", withStep("- {at: 4m, action: set-condition, condition: MemoryPressure=True, nodes: [fake-node-0000]}"), "- {at: 4m, action: set-condition, condition: MemoryPressure",
			"the real kubelet reports MemoryPressure itself and writes it again at its next status update", false},
		{"volume claims", strings.Replace(base, "- apiVersion: apps/v1\n", `- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data}, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- apiVersion: apps/v1
`, 1), "- {apiVersion: v1, kind: PersistentVolumeClaim", "a PersistentVolumeClaim on hollow nodes: not implemented: hollow nodes have no CSI driver", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !c.fakeInvalid {
				// As written, on fake nodes: valid.
				path := writeScenario(t, c.text)
				sc, err := Load(path)
				if err != nil {
					t.Fatalf("on fake nodes the scenario is valid, got: %v", err)
				}
				// --nodes hollow.
				err = sc.CheckNodes(NodeKindHollow, 1)
				wantPrefix := fmt.Sprintf("%s:%d: ", path, lineOf(t, c.text, c.at))
				if err == nil || !strings.Contains(err.Error(), wantPrefix) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("--nodes hollow: got %v\nwant %q at %s", err, c.want, wantPrefix)
				}
			}
			// cluster.nodeKind: hollow.
			text := strings.Replace(c.text, "cluster:\n", "cluster:\n  nodeKind: hollow\n", 1)
			path := writeScenario(t, text)
			_, err := Load(path)
			wantPrefix := fmt.Sprintf("%s:%d: ", path, lineOf(t, text, c.at))
			if err == nil || !strings.Contains(err.Error(), wantPrefix) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("nodeKind: hollow: got %v\nwant %q at %s", err, c.want, wantPrefix)
			}
		})
	}
}

// repairPolicy reboots, then replaces, a node with KernelDeadlock=True.
const repairPolicy = `remediationPolicies:
- apiVersion: nodeshepherd.io/v1alpha1
  kind: RemediationPolicy
  metadata: {name: web}
  spec:
    nodeSelector: {matchLabels: {pool: web}}
    unhealthy:
    - {type: KernelDeadlock, status: "True", for: 20s}
    healthyHold: 30s
    steps:
    - {action: Reboot, timeout: 3m}
    - {action: Replace, timeout: 5m}
`

// fencePolicy fences a silent node.
const fencePolicy = `remediationPolicies:
- apiVersion: nodeshepherd.io/v1alpha1
  kind: RemediationPolicy
  metadata: {name: web}
  spec:
    nodeSelector: {matchLabels: {pool: web}}
    unhealthy:
    - {type: Ready, status: Unknown, for: 20s}
    healthyHold: 30s
    steps:
    - {action: Fence, timeout: 1m}
`

// TestHollowOutOfServiceAccepted: controllers.outOfService runs on hollow
// nodes (TestHollowOutOfService in test/integration shows it on a real
// control plane).
func TestHollowOutOfServiceAccepted(t *testing.T) {
	text := strings.Replace(hollowScenario, "controllers:\n", "controllers:\n  outOfService: {outOfServiceAfter: 1m}\n", 1)
	if !strings.Contains(text, "outOfService") {
		t.Fatal("the scenario has no controllers: section to add outOfService to")
	}
	sc, err := Load(writeScenario(t, text))
	if err != nil {
		t.Fatalf("nodeKind: hollow with controllers.outOfService: %v", err)
	}
	if err := sc.CheckNodes("", 1); err != nil {
		t.Errorf("at --time-scale 1: %v", err)
	}
}

// The fake cloud's repairs work on hollow nodes (issue 47 point 2): a
// scenario with Reboot and Replace steps and cluster.machines runs on them,
// and the hollow machines take the scenario's downtimes.
func TestHollowScenarioRepairs(t *testing.T) {
	text := strings.Replace(hollowScenario, "  node: {maxPods: 30,", "  machines: {rebootDowntime: 15s, replaceDowntime: 25s}\n  node: {maxPods: 30,", 1) + repairPolicy
	sc, err := Load(writeScenario(t, text))
	if err != nil {
		t.Fatalf("nodeKind: hollow with remediation policies: %v", err)
	}
	if err := sc.CheckNodes("", 1); err != nil {
		t.Errorf("at --time-scale 1: %v", err)
	}
	cfg, err := sc.hollowNodeConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RebootDowntime != 15*time.Second || cfg.ReplaceDowntime != 25*time.Second || cfg.IgnorePowerOff {
		t.Errorf("hollow machines: reboot downtime %v, replace downtime %v, ignore power-off %v; want 15s, 25s, false", cfg.RebootDowntime, cfg.ReplaceDowntime, cfg.IgnorePowerOff)
	}
	// Without cluster.machines: the fake nodes' defaults.
	sc, err = Load(writeScenario(t, hollowScenario+repairPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = sc.hollowNodeConfig(""); err != nil {
		t.Fatal(err)
	}
	if cfg.RebootDowntime != fakenode.DefaultRebootDowntime || cfg.ReplaceDowntime != fakenode.DefaultReplaceDowntime {
		t.Errorf("hollow machines by default: reboot downtime %v, replace downtime %v; want the fake nodes' %v, %v", cfg.RebootDowntime, cfg.ReplaceDowntime, fakenode.DefaultRebootDowntime, fakenode.DefaultReplaceDowntime)
	}
}

func lineOf(t *testing.T, text, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q", prefix)
	return 0
}

func TestHollowNodeKindAndTimeScale(t *testing.T) {
	sc, err := Load(writeScenario(t, hollowScenario))
	if err != nil {
		t.Fatal(err)
	}
	err = sc.CheckNodes("", 10)
	if err == nil || !strings.Contains(err.Error(), "--time-scale 10: hollow nodes run at --time-scale 1 only: kubemark takes no flag for the kubelet's lease duration (40s)") {
		t.Errorf("hollow at --time-scale 10: %v", err)
	}
	if err := sc.CheckNodes(NodeKindFake, 10); err != nil {
		t.Errorf("the same scenario on fake nodes at --time-scale 10: %v", err)
	}
	if err := sc.CheckNodes("kwok", 1); err == nil || !strings.Contains(err.Error(), `node kind "kwok": the kinds are fake, hollow`) {
		t.Errorf("unknown kind: %v", err)
	}
	text := strings.Replace(hollowScenario, "nodeKind: hollow", "nodeKind: real", 1)
	path := writeScenario(t, text)
	_, err = Load(path)
	if want := fmt.Sprintf(`%s:%d: cluster.nodeKind "real": the kinds are fake, hollow`, path, lineOf(t, text, "  nodeKind:")); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("bad nodeKind: got %v, want %q", err, want)
	}
	// The fake path is unchanged: a scenario without nodeKind is fake.
	fake, err := Load(writeScenario(t, validScenario))
	if err != nil {
		t.Fatal(err)
	}
	if fake.NodeKind() != NodeKindFake {
		t.Errorf("default node kind %q, want fake", fake.NodeKind())
	}
}
