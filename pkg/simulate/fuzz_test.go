package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	fieldpath "k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// FuzzLoad: any scenario file either loads into a scenario that can run
// (a duration, at least one zone) or is refused with an error that names
// the file; it never panics.
func FuzzLoad(f *testing.F) {
	f.Add(validScenario)
	for _, seed := range []string{
		"",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 1}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: -1m\ncluster: {zones: [{name: a, nodes: 100000000}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncontrollers: {node-monitor-grace-period: 1s}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 1}]}\ntimeline: [{at: 1s, action: partition, zone: b}]\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {nodeGroups: [{name: g, zone: a, nodes: 2, shape: {cpu: '4'}, labels: {pool: x}, taints: [{key: k, effect: NoSchedule}]}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {nodeGroups: [{name: g, zone: a, nodes: 1, taints: [{key: k, effect: Never}]}], zones: [{name: a, nodes: 1}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 2}]}\ncontrollers: {drain: {drainCondition: [KernelDeadlock=True], drainMoveBeforeEvict: true}}\n" +
			"workloads: [{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {selector: {app: s}, ports: [{port: 80}]}}]\n" +
			"timeline: [{at: 1s, action: set-condition, condition: KernelDeadlock=True, nodes: [fake-node-0000]}]\nexpect: [{metric: maxServiceWithoutReadyEndpoints, atMost: 0s}]\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 1}]}\nexpect: [{metric: maxServiceWithoutReadyEndpoints, atMost: 1}]\n",
		"{{{",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {nodeGroups: [{name: g, zone: a, nodes: 1}, {name: h, zone: a, nodes: 1}], " +
			"devices: [{driver: gpu.example.com, count: 2, model: a100, memory: 80Gi, nodeGroups: [g]}, {driver: gpu.example.com, count: 1, nodeGroups: [h]}, {driver: nic.example.com, count: 1, class: nic}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 1}], devices: [{driver: G, count: 0}, {driver: g.io, count: 1, nodeGroups: [x]}, {driver: g.io, count: 129, memory: -1}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {images: [{name: pause:3.10, size: 750kB}, {names: [nginx:1.27, 'nginx@sha256:" + strings.Repeat("a", 64) + "'], size: 70MB}], " +
			"node: {images: [pause:3.10]}, kubelet: {nodeStatusMaxImages: 1}, nodeGroups: [{name: g, zone: a, nodes: 1, images: [nginx:1.27, pause:3.10]}]}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {images: [{name: Bad, size: 1.5B}, {size: [1]}, {name: x, names: [y]}], zones: [{name: a, nodes: 1}], node: {images: [x, x, z]}}\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 2}], machines: {rebootDowntime: 5s}}\n" +
			"remediationPolicies: [{apiVersion: nodeshepherd.io/v1alpha1, kind: RemediationPolicy, metadata: {name: p}, spec: {unhealthy: [{type: KernelDeadlock, status: 'True', for: 20s}], " +
			"healthyHold: 30s, steps: [{action: Taint, timeout: 60s, taint: {key: k, effect: NoSchedule}}, {action: Reboot, timeout: 2m}], brakes: {maxInRepair: 20%}}}]\n" +
			"timeline: [{at: 1s, action: set-condition, condition: KernelDeadlock=True, survivesReboot: true, nodes: [fake-node-0000]}]\nexpect: [{metric: repairsDone, atLeast: 1}]\n",
		"apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nduration: 1m\ncluster: {zones: [{name: a, nodes: 1}]}\n" +
			"remediationPolicies: [{apiVersion: nodeshepherd.io/v1alpha1, kind: RemediationPolicy, metadata: {name: p}, spec: {unhealthy: [{type: X, status: True}], steps: [{action: Reboot, timeout: 5s, taint: {}}]}}, {file: x.yaml}, 3]\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		path := filepath.Join(t.TempDir(), "scenario.yaml")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		sc, err := Load(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if sc.Duration.Duration <= 0 || len(sc.Cluster.Zones)+len(sc.Cluster.NodeGroups) == 0 {
			t.Fatalf("loaded a scenario that cannot run: duration %v, %d zones, %d node groups", sc.Duration.Duration, len(sc.Cluster.Zones), len(sc.Cluster.NodeGroups))
		}
		cfg := sc.fakeNodeConfig(1)
		if _, err := fakenode.New(cfg); err != nil && !strings.Contains(err.Error(), "client is required") {
			t.Fatalf("loaded a scenario whose nodes are invalid: %v", err)
		}
		// Every image a node or group names is in the table, once.
		if len(cfg.Images) != len(sc.Cluster.Node.Images) {
			t.Fatalf("node.images %v resolved to %v", sc.Cluster.Node.Images, cfg.Images)
		}
		for i, g := range sc.Cluster.NodeGroups {
			if len(cfg.Groups[i].Images) != len(g.Images) {
				t.Fatalf("group %s's images %v resolved to %v", g.Name, g.Images, cfg.Groups[i].Images)
			}
		}
		// Its policies are what the API server and the controller accept,
		// and so are they divided by any scale the scenario allows.
		names := map[string]bool{}
		for _, d := range sc.policies() {
			if errs := d.policy.Spec.Validate(fieldpath.NewPath("spec")); len(errs) > 0 || d.policy.Name == "" || names[d.policy.Name] {
				t.Fatalf("loaded policy %q: %v (names so far %v)", d.policy.Name, errs, names)
			}
			names[d.policy.Name] = true
			if sc.MaxTimeScale > 0 && sc.CheckTimeScale(sc.MaxTimeScale) != nil {
				t.Fatalf("policy %q invalid at the scenario's own maxTimeScale %g: %v", d.policy.Name, sc.MaxTimeScale, sc.CheckTimeScale(sc.MaxTimeScale))
			}
		}
	})
}
