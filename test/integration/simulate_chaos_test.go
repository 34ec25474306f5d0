package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// chaosScenario is small and fast: 6 nodes in 2 zones, 6s grace, pods that
// tolerate not-ready/unreachable for 8s, drains on KernelDeadlock=True and
// the outofservice controller, so that seed 3's faults (partitions, a
// reboot, kubelet stops, a Ready flap) lead to taints and evictions.
const chaosScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: chaos
duration: 40s
controllers:
  shared: {nodeMonitorPeriod: 1s}
  nodeLifecycle: {nodeMonitorGracePeriod: 6s}
  drain: {drainCondition: [KernelDeadlock=True], maxConcurrentDrains: 1, maxCordonedNodes: "2"}
  outOfService: {outOfServiceAfter: 6s, maxOutOfServiceNodes: 1}
cluster:
  zones:
  - {name: zone-a, nodes: 3}
  - {name: zone-b, nodes: 3}
  node: {cpu: "4", memory: 8Gi}
  # Renewals well inside the 6 s grace period: with the kubelet's default
  # 10 s renew interval every healthy node falls silent past its grace
  # between two renewals, zones flap to FullDisruption with no fault at all,
  # and the all-zones mode strips taints the checker rightly flags.
  kubelet: {leaseDuration: 8s, leaseRenewInterval: 2s, nodeStatusUpdateFrequency: 2s}
workloads:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: app}
  spec:
    replicas: 6
    selector: {matchLabels: {app: app}}
    template:
      metadata: {labels: {app: app}}
      spec:
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 8}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 8}
        containers: [{name: app, image: registry.k8s.io/pause:3.10}]
timeline:
- {at: 2s, action: network-blip, for: 3s, nodes: [fake-node-0004]}
`

// TestSimulateChaosSeed: simulate --chaos-seed adds seed 3's random node
// faults to the scenario's timeline and runs the chaos checker: the output
// and both reports have a checker section with the faults and no
// violation, the faults are in the run's marks, and a fault kind simulate
// cannot apply is refused with exit 2 before anything starts.
func TestSimulateChaosSeed(t *testing.T) {
	bin := framework.Binary(t)
	scenario := filepath.Join(t.TempDir(), "chaos.yaml")
	if err := os.WriteFile(scenario, []byte(chaosScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := framework.Command(bin, "simulate", scenario, "--chaos-seed", "3", "--chaos-faults", "reboot,leader-kill").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "simulate cannot apply leader-kill") {
		t.Errorf("--chaos-faults leader-kill: %v, want exit 2 naming the kind: %s", err, out)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err = framework.CommandContext(ctx, bin, "simulate", scenario, "--chaos-seed=3", "--time-scale=2", "-o", dir).CombinedOutput()
	t.Logf("simulate --chaos-seed 3:\n%s", out)
	if err != nil {
		t.Fatalf("simulate failed: %v (logs in %s)", err, dir)
	}
	for _, want := range []string{"chaos seed 3: 8 faults", "Checker (nodeshepherd; chaos seed 3, 8 faults of node-partition,",
		"fault +4.181s rack-partition for 6.864s on fake-node-0001,fake-node-0002", "no invariant violated"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	rep := readReport(t, dir)
	if len(rep.Runs) != 1 || rep.Runs[0].Checker == nil {
		t.Fatalf("report.json has no checker section: %+v", rep.Runs)
	}
	c := rep.Runs[0].Checker
	if c.Seed != 3 || len(c.Faults) != 8 || len(c.Violations) != 0 || len(c.NotChecked) == 0 {
		t.Errorf("checker section: %+v", c)
	}
	// The scenario's blip (split into partition and heal) and the faults'
	// 16 steps are all in the marks.
	if n := len(rep.Runs[0].Marks); n != 18 {
		t.Errorf("%d marks, want 18 (2 of the scenario, 16 of the faults): %+v", n, rep.Runs[0].Marks)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(page), "<h2>Checker</h2>") || !strings.Contains(string(page), "No invariant violated.") {
		t.Errorf("report.html lacks the checker section: %v", err)
	}
}
