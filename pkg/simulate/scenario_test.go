package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const validScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: test
duration: 5m
controllers:
  nodeLifecycle:
    nodeMonitorGracePeriod: 40s
    nodeEvictionRate: 0.2
  drain: {drainCondition: ["KernelDeadlock=True,2m"]}
cluster:
  zones:
  - {name: zone-a, nodes: 2}
  - {name: zone-b, nodes: 1}
  node: {cpu: "4", memory: 8Gi}
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
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 120}
        containers: [{name: web, image: pause}]
timeline:
- {at: 30s, action: network-blip, nodes: [fake-node-0000], for: 45s}
- {at: 1m, action: partition, zone: zone-a, count: 1}
- {at: 2m, action: set-condition, condition: KernelDeadlock=True, all: true, for: 1m}
- {at: 3m, action: burst, burst: {name: urgent, replicas: 2, priorityClassName: high, cpu: "1"}}
expect:
- {metric: podNotReadyAfterRecovery, atMost: 60s}
- {metric: maxNodesCordoned, atMost: 2}
- {metric: podsEvicted, atLeast: 0, run: upstream}
`

func writeScenario(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadValidScenarioAndScale(t *testing.T) {
	sc, err := Load(writeScenario(t, validScenario))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Timeline) != 4 || len(sc.Expect) != 3 || len(sc.Workloads) != 1 {
		t.Fatalf("decoded %d steps, %d expectations, %d workloads", len(sc.Timeline), len(sc.Expect), len(sc.Workloads))
	}
	cfg, kcm, err := sc.Controllers.scaled(sc.path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeLifecycle.NodeMonitorGracePeriod != 4*time.Second || cfg.Shared.NodeMonitorPeriod != 500*time.Millisecond {
		t.Errorf("durations not divided by 10: grace %v, period %v", cfg.NodeLifecycle.NodeMonitorGracePeriod, cfg.Shared.NodeMonitorPeriod)
	}
	if cfg.NodeLifecycle.NodeEvictionRate != 2 {
		t.Errorf("rate not multiplied by 10: %v", cfg.NodeLifecycle.NodeEvictionRate)
	}
	if got := cfg.Drain.Conditions; len(got) != 1 || got[0] != "KernelDeadlock=True,12s" {
		t.Errorf("drain condition's minimum duration not scaled: %v", got)
	}
	if !strings.Contains(strings.Join(kcm, " "), "--node-monitor-grace-period=4s") || !strings.Contains(strings.Join(kcm, " "), "--node-eviction-rate=2") {
		t.Errorf("kube-controller-manager flags: %v", kcm)
	}
	ms := sc.manifests(10)
	spec := podSpec(ms[0].obj)
	if ts := spec.Tolerations[0].TolerationSeconds; ts == nil || *ts != 12 {
		t.Errorf("tolerationSeconds not scaled to 12: %v", ts)
	}
	// The original is untouched: a second run scales afresh.
	if ts := podSpec(sc.Workloads[0].objects[0].obj).Tolerations[0].TolerationSeconds; *ts != 120 {
		t.Errorf("scaling changed the scenario: %d", *ts)
	}
	f := sc.fakeNodeConfig(10)
	if f.LeaseRenewInterval != time.Second || f.LeaseDuration != 4*time.Second {
		t.Errorf("kubelet timing not scaled: renew %v, lease %v", f.LeaseRenewInterval, f.LeaseDuration)
	}
	if sc.Timeline[2].cond == nil || sc.Timeline[2].cond.Type != "KernelDeadlock" || sc.Timeline[2].cond.Status != v1.ConditionTrue {
		t.Errorf("condition not parsed: %+v", sc.Timeline[2].cond)
	}
	if sc.Expect[2].appliesTo(RunNodeShepherd) || !sc.Expect[2].appliesTo(RunUpstream) || !sc.Expect[0].appliesTo(RunNodeShepherd) {
		t.Error("expectations' runs wrong")
	}
}

func TestBadScenariosNameFileAndLine(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(validScenario, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(validScenario, old, new, 1)
	}
	cases := []struct {
		name, text, want string
	}{
		{"unknown top-level field", replace("duration: 5m", "duration: 5m\ndurration: 6m"), ":5: field durration not found"},
		{"bad duration", replace("duration: 5m", "duration: 5 minutes"), `:4: invalid duration "5 minutes"`},
		{"missing duration", replace("duration: 5m\n", ""), "duration: give how long"},
		{"negative duration", replace("for: 45s", "for: -45s"), "must not be negative"},
		{"name reaching outside the report directory", replace("name: test", "name: ../../etc"), `:3: name "../../etc": the report directory is named after it`},
		{"name with a slash", replace("name: test", "name: a/b"), `name "a/b"`},
		{"too many nodes", replace("{name: zone-a, nodes: 2}", "{name: zone-a, nodes: 6000}"), "6001 nodes in all, more than the limit of 5000"},
		{"too many replicas", replace("replicas: 3", "replicas: 60000"), "60000 replicas in all, more than the limit of 50000 pods"},
		{"too long", replace("duration: 5m", "duration: 48h"), "duration 48h0m0s is longer than the limit of 24h0m0s"},
		{"time scale below 1", replace("duration: 5m", "duration: 5m\nmaxTimeScale: 0.5"), ":5: maxTimeScale 0.5: give the largest --time-scale"},
		{"unknown zone", replace("zone: zone-a, count: 1", "zone: zone-x"), `:30: timeline[1] (partition): unknown zone "zone-x"; the cluster's zones: zone-a, zone-b`},
		{"group without node groups", replace("zone: zone-a, count: 1", "group: db"), `:30: timeline[1] (partition): group "db": the cluster has no nodeGroups`},
		{"unknown node", replace("nodes: [fake-node-0000]", "nodes: [node-7]"), `:29: timeline[0] (network-blip): unknown node "node-7"; nodes are named fake-node-0000 to fake-node-0002`},
		{"unknown action", replace("action: partition", "action: explode"), `:30: timeline[1] (explode): unknown action "explode"`},
		{"blip without for", replace(", for: 45s}", "}"), "network-blip needs for:"},
		{"bad condition", replace("condition: KernelDeadlock=True,", "condition: KernelDeadlock=Maybe,"), "must be True, False or Unknown"},
		{"step after the end", replace("{at: 3m, action: burst", "{at: 7m, action: burst"), "at 7m0s is after the scenario's duration 5m0s"},
		{"unknown step field", replace("count: 1}", "count: 1, foo: bar}"), ":30: field foo not found"},
		{"unknown controller setting", replace("nodeEvictionRate: 0.2", "nodeEvictionRat: 0.2"), ":8: unknown setting controllers.nodeLifecycle.nodeEvictionRat; the section's settings: nodeMonitorGracePeriod,"},
		{"bad controller value", replace("nodeEvictionRate: 0.2", "nodeEvictionRate: fast"), `:8: controllers.nodeLifecycle.nodeEvictionRate: invalid argument "fast"`},
		{"invalid controller setting", replace("nodeEvictionRate: 0.2", "nodeEvictionRate: -1"), "--node-eviction-rate must not be negative"},
		{"simulation-owned setting", replace("nodeEvictionRate: 0.2", "nodeEvictionRate: 0.2\n  scheduler: {schedulerName: mine}"), ":9: controllers.scheduler.schedulerName is set by the simulation"},
		{"old flag-name spelling", replace("  nodeLifecycle:\n", "  node-monitor-period: 2s\n  nodeLifecycle:\n"), ":6: controllers.node-monitor-period is the old spelling; write shared.nodeMonitorPeriod"},
		{"old spelling inside a section", replace("nodeEvictionRate: 0.2", "node-eviction-rate: 0.2"), ":8: controllers.nodeLifecycle.node-eviction-rate is the old spelling; write nodeLifecycle.nodeEvictionRate"},
		{"setting without its section", replace("  nodeLifecycle:\n", "  maxCordonedNodes: 2\n  nodeLifecycle:\n"), ":6: controllers.maxCordonedNodes is a setting, not a section; write drain.maxCordonedNodes"},
		{"shared setting in a controller's section", replace("nodeEvictionRate: 0.2", "nodeMonitorPeriod: 2s"), ":8: unknown setting controllers.nodeLifecycle.nodeMonitorPeriod; it belongs to section shared: write shared.nodeMonitorPeriod"},
		{"non-controller section", replace("  nodeLifecycle:\n", "  leaderElection: {leaderElect: false}\n  nodeLifecycle:\n"), `:6: unknown section "controllers.leaderElection"; sections: shared, nodeLifecycle,`},
		{"controllers not a mapping", replace("controllers:\n  nodeLifecycle:\n    nodeMonitorGracePeriod: 40s\n    nodeEvictionRate: 0.2\n  drain: {drainCondition: [\"KernelDeadlock=True,2m\"]}\n", "controllers: [a]\n"), ":5: controllers: expected a mapping of sections"},
		{"manifest unknown field", replace("replicas: 3", "replicas: 3\n    replicaz: 4"), `:16: strict decoding error: unknown field "spec.replicaz"`},
		{"manifest without name", replace("metadata: {name: web}", "metadata: {labels: {a: b}}"), ":16: metadata.name is missing"},
		{"unknown metric", replace("metric: maxNodesCordoned", "metric: maxNodesCordonned"), `:35: expect[1]: unknown metric "maxNodesCordonned"`},
		{"count given as duration", replace("maxNodesCordoned, atMost: 2", "maxNodesCordoned, atMost: 2s"), "maxNodesCordoned is a count"},
		{"duration given as count", replace("atMost: 60s", "atMost: sixty"), "podNotReadyAfterRecovery is a duration"},
		{"endpoint outage without a Service", replace("metric: maxNodesCordoned, atMost: 2", "metric: maxServiceWithoutReadyEndpoints, atMost: 0s"), ":35: expect[1]: maxServiceWithoutReadyEndpoints counts the endpoints of the scenario's Services, but its workloads have no Service"},
		{"bad move-before-evict", replace(`drain: {drainCondition: ["KernelDeadlock=True,2m"]}`, `drain: {drainCondition: ["KernelDeadlock=True,2m"], drainMoveBeforeEvict: maybe}`), `:9: controllers.drain.drainMoveBeforeEvict: invalid argument "maybe"`},
		{"bad run", replace("run: upstream", "run: kcm"), `run "kcm": must be nodeshepherd, upstream or both`},
		{"no zones", replace("  - {name: zone-a, nodes: 2}\n  - {name: zone-b, nodes: 1}\n", ""), "cluster.zones: list at least one zone"},
		{"zone without nodes", replace("{name: zone-b, nodes: 1}", "{name: zone-b, nodes: 0}"), ":13: cluster.zones[1]: nodes must be at least 1"},
		{"bad quantity", replace(`cpu: "4"`, "cpu: four"), `:14: invalid quantity "four"`},
		{"wrong kind", replace("kind: Scenario", "kind: Scenery"), "expected apiVersion: nodeshepherd.io/v1alpha1 and kind: Scenario"},
		{"missing workload file", replace("- apiVersion: apps/v1\n  kind: Deployment", "- file: nope.yaml\n- apiVersion: apps/v1\n  kind: Deployment"), "workloads[0]: open"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeScenario(t, c.text)
			_, err := Load(p)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, c.want)
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

const groupsCluster = `cluster:
  nodeGroups:
  - name: a-big
    zone: zone-a
    nodes: 2
    shape: {cpu: "16", memory: 64Gi, maxPods: 50}
    labels: {pool: big}
    taints: [{key: dedicated, value: big, effect: NoSchedule}]
  - {name: b-general, zone: zone-b, nodes: 1}
  node: {cpu: "4", memory: 8Gi}
`

// Node groups give each group's nodes their zone, shape, labels and taints;
// the timeline targets the groups' zones.
func TestNodeGroupsScenario(t *testing.T) {
	text := strings.Replace(validScenario, "cluster:\n  zones:\n  - {name: zone-a, nodes: 2}\n  - {name: zone-b, nodes: 1}\n  node: {cpu: \"4\", memory: 8Gi}\n", groupsCluster, 1)
	if text == validScenario {
		t.Fatal("test bug: cluster block not replaced")
	}
	sc, err := Load(writeScenario(t, text))
	if err != nil {
		t.Fatal(err)
	}
	f := sc.fakeNodeConfig(1)
	if len(f.Groups) != 2 || f.Groups[0].Count != 2 || f.Groups[0].CPU.String() != "16" || f.Groups[0].MaxPods != 50 ||
		f.Groups[0].Labels["pool"] != "big" || len(f.Groups[0].Taints) != 1 || f.Groups[0].Taints[0].Effect != v1.TaintEffectNoSchedule ||
		f.Groups[1].Zone != "zone-b" || !f.Groups[1].CPU.IsZero() || f.CPU.String() != "4" {
		t.Errorf("fake node config %+v", f)
	}

	// A step may target a node group (with its zone, or alone).
	for _, target := range []string{"group: a-big, count: 1", "zone: zone-a, group: a-big"} {
		if _, err := Load(writeScenario(t, strings.Replace(text, "zone: zone-a, count: 1", target, 1))); err != nil {
			t.Errorf("timeline target %q: %v", target, err)
		}
	}

	bad := func(old, new string) string {
		if !strings.Contains(text, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(text, old, new, 1)
	}
	for _, c := range []struct{ name, text, want string }{
		{"zones and groups", bad("  nodeGroups:", "  zones: [{name: zone-a, nodes: 1}]\n  nodeGroups:"), ":13: cluster: give zones or nodeGroups, not both"},
		{"no name", bad("- name: a-big\n    zone", "- zone"), ":12: cluster.nodeGroups[0]: name is missing"},
		{"twice", bad("name: b-general", "name: a-big"), `:18: cluster.nodeGroups[1]: node group "a-big" is listed twice`},
		{"no zone", bad("{name: b-general, zone: zone-b,", "{name: b-general,"), ":18: cluster.nodeGroups[1]: zone is missing"},
		{"no nodes", bad("nodes: 1}", "nodes: 0}"), ":18: cluster.nodeGroups[1]: nodes must be at least 1, got 0"},
		{"bad label", bad("pool: big", "pool: big big"), `:16: cluster.nodeGroups[0].labels: label pool value "big big"`},
		{"bad taint", bad("effect: NoSchedule", "effect: Never"), `:17: cluster.nodeGroups[0].taints[0]: taint dedicated: effect "Never"`},
		{"bad shape", bad(`cpu: "16"`, "cpu: sixteen"), `:15: invalid quantity "sixteen"`},
		{"unknown field", bad("nodes: 2\n", "nodes: 2\n    size: 3\n"), ":15: field size not found"},
		{"unknown zone in timeline", bad("zone: zone-a, count: 1", "zone: zone-c"), `unknown zone "zone-c"; the cluster's zones: zone-a, zone-b`},
		{"too many nodes", bad("nodes: 2\n", "nodes: 5000\n"), "5001 nodes in all, more than the limit of 5000"},
		{"unknown group in timeline", bad("zone: zone-a, count: 1", "group: a-small"), `unknown node group "a-small"; the cluster's node groups: a-big, b-general`},
		{"group not in zone", bad("zone: zone-a, count: 1", "zone: zone-a, group: b-general"), `node group "b-general" is not in zone "zone-a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeScenario(t, c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant %q", err, c.want)
			}
		})
	}
}

func TestExpectationHolds(t *testing.T) {
	e := Expectation{Metric: "timeToFirstEviction", AtLeast: &Bound{raw: "5m"}, AtMost: &Bound{raw: "6m"}}
	if msg := e.check(); msg != "" {
		t.Fatal(msg)
	}
	v := func(f float64) *float64 { return &f }
	for _, c := range []struct {
		v    *float64
		want bool
	}{{v(299), false}, {v(300), true}, {v(360), true}, {v(361), false}, {nil, false}} {
		if got := e.holds(c.v); got != c.want {
			t.Errorf("holds(%v) = %v, want %v", c.v, got, c.want)
		}
	}
	// "never" is infinite: an atLeast alone holds.
	only := Expectation{Metric: "timeToTaint", AtLeast: &Bound{raw: "1m"}}
	only.check()
	if !only.holds(nil) {
		t.Error("never should satisfy atLeast")
	}
}

// Every example states the largest time scale its expectations hold at
// (make test runs it there), and simulate refuses a larger one naming the
// file's line and why.
func TestExamplesStateTheirMaxTimeScale(t *testing.T) {
	files, err := filepath.Glob("../../examples/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example scenarios: %v", err)
	}
	for _, f := range files {
		sc, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if sc.MaxTimeScale == 0 {
			t.Errorf("%s: no maxTimeScale; say the largest --time-scale its expectations hold at", f)
			continue
		}
		if err := sc.CheckTimeScale(sc.MaxTimeScale); err != nil {
			t.Errorf("%s at its own maxTimeScale: %v", f, err)
		}
		err = sc.CheckTimeScale(sc.MaxTimeScale + 1)
		if err == nil || !strings.Contains(err.Error(), f+":") || !strings.Contains(err.Error(), "maxTimeScale") {
			t.Errorf("%s at %g: %v, want a refusal naming the file's line and maxTimeScale", f, sc.MaxTimeScale+1, err)
		}
	}
}

// A scenario's drain section sets move-before-evict under its flag's
// camelCase name (the configuration file's key), and takes a Service among
// its workloads for the endpoint measures.
func TestMoveBeforeEvictScenario(t *testing.T) {
	text := strings.Replace(validScenario, `drain: {drainCondition: ["KernelDeadlock=True,2m"]}`,
		`drain: {drainCondition: ["KernelDeadlock=True,2m"], drainMoveBeforeEvict: true}`, 1)
	text = strings.Replace(text, "timeline:\n", `- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec:
    selector: {app: web}
    ports: [{port: 80}]
timeline:
`, 1)
	text = strings.Replace(text, "- {metric: maxNodesCordoned, atMost: 2}", "- {metric: maxServiceWithoutReadyEndpoints, atMost: 0s}", 1)
	sc, err := Load(writeScenario(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sc.services()["default/web"]; !ok {
		t.Errorf("Service web not among the scenario's Services: %v", sc.services())
	}
	cfg, _, err := sc.Controllers.scaled(sc.path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Drain.MoveBeforeEvict {
		t.Error("drain.drainMoveBeforeEvict: true did not turn move-before-evict on")
	}
	def, _, err := (&Settings{}).scaled(sc.path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if def.Drain.MoveBeforeEvict {
		t.Error("move-before-evict is on without being asked for")
	}
}

// The fidelity scenarios (docs/simulate.md#fidelity) run on both kinds of
// node: each loads and is accepted for fake and for hollow nodes at time
// scale 1, so `--nodes fake,hollow` compares the same scenario.
func TestFidelityScenariosRunOnBothKinds(t *testing.T) {
	files, err := filepath.Glob("../../examples/scenarios/fidelity/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "web.yaml" {
			continue // the workload file they share
		}
		n++
		sc, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{NodeKindFake, NodeKindHollow} {
			if err := sc.CheckNodes(kind, 1); err != nil {
				t.Errorf("%s on %s nodes: %v", f, kind, err)
			}
		}
	}
	if n < 5 {
		t.Errorf("%d fidelity scenarios, want at least 5", n)
	}
}
