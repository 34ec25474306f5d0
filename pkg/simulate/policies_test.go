package simulate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// policyScenario has one inline policy and one from a file, a condition
// that survives reboots and expectations on the repair measures.
const policyScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: repair
duration: 5m
maxTimeScale: 5
cluster:
  zones:
  - {name: zone-a, nodes: 3}
  node: {labels: {pool: general}}
  machines: {rebootDowntime: 40s, replaceDowntime: 1m}
remediationPolicies:
- apiVersion: nodeshepherd.io/v1alpha1
  kind: RemediationPolicy
  metadata:
    name: general
    labels: {team: infra}
  spec:
    nodeSelector:
      matchLabels: {pool: general}
    unhealthy:
    - {type: KernelDeadlock, status: "True", for: 20s, staleAfter: 5m}
    healthyHold: 60s
    steps:
    - action: Taint
      timeout: 90s
      taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}
    - {action: Reboot, timeout: 3m}
    brakes: {maxInRepair: 1, maxUnhealthy: "20%", cooldown: 10m}
- file: more-policies.yaml
timeline:
- {at: 30s, action: set-condition, condition: KernelDeadlock=True, survivesReboot: true, nodes: [fake-node-0000]}
expect:
- {metric: repairsDone, atLeast: 1}
- {metric: nodesRebooted, atMost: 1}
`

const morePolicies = `# two documents
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: gpu}
spec:
  nodeSelector: {matchLabels: {pool: gpu}}
  unhealthy: [{type: Ready, status: Unknown, for: 1m}]
  healthyHold: 30s
  steps: [{action: Drain, timeout: 5m}, {action: Replace, timeout: 10m}]
---
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: batch}
spec:
  unhealthy: [{type: DiskPressure, status: "True", for: 2m}]
  healthyHold: 1m
  steps: [{action: Taint, timeout: 5m, taint: {key: k, effect: NoExecute}}]
`

func writePolicyScenario(t *testing.T, scenario, more string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "more-policies.yaml"), []byte(more), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(p, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadRemediationPolicies(t *testing.T) {
	sc, err := Load(writePolicyScenario(t, policyScenario, morePolicies))
	if err != nil {
		t.Fatal(err)
	}
	ps := sc.policies()
	if len(ps) != 3 || ps[0].policy.Name != "general" || ps[1].policy.Name != "gpu" || ps[2].policy.Name != "batch" {
		t.Fatalf("policies %v", ps)
	}
	g := ps[0].policy
	if g.Spec.HealthyHold.Duration != time.Minute || g.Spec.Steps[0].Taint.Effect != "NoSchedule" || g.Spec.Brakes.MaxUnhealthy.String() != "20%" ||
		g.Labels["team"] != "infra" || g.Spec.Unhealthy[0].StaleAfter.Duration != 5*time.Minute {
		t.Errorf("general decoded as %+v", g)
	}
	if !strings.HasSuffix(ps[1].src(), "more-policies.yaml:2") || !strings.HasSuffix(ps[2].src(), "more-policies.yaml:11") {
		t.Errorf("sources %s, %s", ps[1].src(), ps[2].src())
	}
	if c := sc.Timeline[0].cond; c == nil || !c.SurvivesReboot || !strings.Contains(sc.Timeline[0].String(), "survives reboots") {
		t.Errorf("survivesReboot not carried to the fault: %+v", c)
	}
	f := sc.fakeNodeConfig(10)
	if f.RebootDowntime != 4*time.Second || f.ReplaceDowntime != 6*time.Second {
		t.Errorf("machine downtimes not scaled: %v, %v", f.RebootDowntime, f.ReplaceDowntime)
	}
	if d := (&Scenario{}).fakeNodeConfig(10); d.RebootDowntime != 2*time.Second || d.ReplaceDowntime != 3*time.Second {
		t.Errorf("default downtimes not scaled: %v, %v", d.RebootDowntime, d.ReplaceDowntime)
	}

	// Durations are divided by the scale; the original stays.
	objs, srcs, err := sc.policyObjects(5)
	if err != nil || len(objs) != 3 || len(srcs) != 3 {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	spec := objs[0].Object["spec"].(map[string]any)
	steps := spec["steps"].([]any)
	if spec["healthyHold"] != "12s" || steps[0].(map[string]any)["timeout"] != "18s" || spec["brakes"].(map[string]any)["cooldown"] != "2m0s" ||
		spec["unhealthy"].([]any)[0].(map[string]any)["for"] != "4s" || spec["unhealthy"].([]any)[0].(map[string]any)["staleAfter"] != "1m0s" {
		t.Errorf("scaled spec %v", spec)
	}
	if _, ok := objs[0].Object["status"]; ok || objs[0].GetAPIVersion() != "nodeshepherd.io/v1alpha1" || objs[0].GetKind() != "RemediationPolicy" {
		t.Errorf("object %v", objs[0].Object)
	}
	if g.Spec.HealthyHold.Duration != time.Minute {
		t.Error("scaling changed the scenario's policy")
	}
	if err := sc.CheckTimeScale(5); err != nil {
		t.Errorf("scale 5: %v", err)
	}
}

// A policy whose timeouts, divided by the time scale, fall under the
// controller's minimum is refused at the scale (exit 2), with the largest
// scale it allows; a maxTimeScale above it is refused at load.
func TestPolicyTimeScaleLimit(t *testing.T) {
	text := strings.Replace(policyScenario, "maxTimeScale: 5\n", "", 1)
	sc, err := Load(writePolicyScenario(t, text, morePolicies))
	if err != nil {
		t.Fatal(err)
	}
	// general: Taint 90s with a 60s hold allows 9 (90s/10s) and 30 (90s-60s).
	if got := maxPolicyScale(&sc.policies()[0].policy.Spec); got != 9 {
		t.Errorf("limit %v, want 9", got)
	}
	if err := sc.CheckTimeScale(9); err != nil {
		t.Errorf("scale 9: %v", err)
	}
	err = sc.CheckTimeScale(10)
	if err == nil || !strings.Contains(err.Error(), "s.yaml:24: --time-scale 10: RemediationPolicy general") || !strings.Contains(err.Error(), "allows --time-scale 9 at most") {
		t.Errorf("scale 10: %v", err)
	}
	_, err = Load(writePolicyScenario(t, strings.Replace(policyScenario, "maxTimeScale: 5", "maxTimeScale: 10", 1), morePolicies))
	if err == nil || !strings.Contains(err.Error(), ":5: maxTimeScale 10: RemediationPolicy general") {
		t.Errorf("maxTimeScale above the policy's limit: %v", err)
	}
}

func TestBadPoliciesNameFileAndLine(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(policyScenario, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(policyScenario, old, new, 1)
	}
	cases := []struct {
		name, text, more, want string
	}{
		{"unknown spec field", replace("    healthyHold: 60s", "    healthyHold: 60s\n    healthyHould: 2m"), morePolicies,
			`:23: remediationPolicies[0]: spec.healthyHould: unknown field "healthyHould"; spec takes brakes, healthyHold, nodeSelector, paused, recurrenceWindow, steps, unhealthy`},
		{"unknown step field", replace("{action: Reboot, timeout: 3m}", "{action: Reboot, timeot: 3m}"), morePolicies,
			`:27: remediationPolicies[0]: spec.steps[1].timeot: unknown field`},
		{"unquoted status", replace(`status: "True", for: 20s`, `status: True, for: 20s`), morePolicies,
			`:21: remediationPolicies[0]: spec.unhealthy[0].status: expected a string, got a boolean (True): quote it, e.g. "True"`},
		{"bad duration", replace("healthyHold: 60s", "healthyHold: a minute"), morePolicies, `:22: remediationPolicies[0]: spec.healthyHold: invalid duration "a minute"`},
		{"namespace", replace("    name: general\n", "    name: general\n    namespace: x\n"), morePolicies, `:16: remediationPolicies[0]: metadata.namespace: unknown field`},
		{"status", replace("  spec:\n", "  status: {nodes: 3}\n  spec:\n"), morePolicies, `:17: remediationPolicies[0]: status: the remediation controller writes the status`},
		{"Validate: timeout below the hold", replace("timeout: 90s", "timeout: 30s"), morePolicies,
			`:25: remediationPolicies[0]: spec.steps[0].timeout: Invalid value: "30s": must be at least 1m1s`},
		{"Validate: unknown action", replace("action: Reboot", "action: Reimage"), morePolicies, `:27: remediationPolicies[0]: spec.steps[1].action: Unsupported value: "Reimage"`},
		{"Validate: bad brake", replace(`maxUnhealthy: "20%"`, `maxUnhealthy: "150%"`), morePolicies, `:28: remediationPolicies[0]: spec.brakes.maxUnhealthy`},
		{"Validate: taint on a Drain", policyScenario, strings.Replace(morePolicies, "{action: Drain, timeout: 5m}", "{action: Drain, timeout: 5m, taint: {key: a, effect: NoSchedule}}", 1),
			`more-policies.yaml:9: remediationPolicies[1] (more-policies.yaml, document 1): spec.steps[0].taint: Forbidden`},
		{"wrong kind", replace("  kind: RemediationPolicy", "  kind: Deployment"), morePolicies, `:13: remediationPolicies[0]: kind "Deployment"`},
		{"wrong apiVersion", replace("- apiVersion: nodeshepherd.io/v1alpha1\n  kind: Rem", "- apiVersion: v1\n  kind: Rem"), morePolicies, `:12: remediationPolicies[0]: apiVersion "v1"`},
		{"no name", replace("    name: general\n", ""), morePolicies, `:14: remediationPolicies[0]: metadata.name is missing`},
		{"bad name", replace("    name: general\n", "    name: General_1\n"), morePolicies, `:15: remediationPolicies[0]: metadata.name "General_1"`},
		{"duplicate name", policyScenario, strings.Replace(morePolicies, "name: batch", "name: general", 1), `more-policies.yaml:11: RemediationPolicy "general" is already defined at`},
		{"missing file", replace("- file: more-policies.yaml", "- file: nope.yaml"), morePolicies, `:29: remediationPolicies[1]: open`},
		{"file and more", replace("- file: more-policies.yaml", "- {file: more-policies.yaml, kind: x}"), morePolicies, `:29: remediationPolicies[1]: {file: PATH} takes nothing else`},
		{"not a mapping", replace("- file: more-policies.yaml", "- more-policies.yaml"), morePolicies, `:29: remediationPolicies: expected a RemediationPolicy`},
		{"survivesReboot on a partition", replace("action: set-condition, condition: KernelDeadlock=True, survivesReboot: true", "action: partition, survivesReboot: true"), morePolicies,
			`timeline[0] (partition): partition takes no survivesReboot`},
		{"repair measure without policies", strings.Replace(policyScenario, policyScenario[strings.Index(policyScenario, "remediationPolicies:"):strings.Index(policyScenario, "timeline:")], "", 1), morePolicies,
			`expect[0]: repairsDone counts the repairs of remediation policies, but the scenario has no remediationPolicies`},
		{"machines without repairs", strings.Replace(replace("{action: Reboot, timeout: 3m}", "{action: Drain, timeout: 3m}"), "- file: more-policies.yaml\n", "", 1), morePolicies,
			`:10: cluster.machines.rebootDowntime: only the fake cloud provider's repairs take it`},
		{"ignorePowerOff without a Fence", replace("replaceDowntime: 1m}", "replaceDowntime: 1m, ignorePowerOff: true}"), morePolicies,
			`:10: cluster.machines.ignorePowerOff: only a Fence step's power-off request takes it`},
		{"a Fence without outofservice", replace("{action: Reboot, timeout: 3m}", "{action: Fence, timeout: 3m}"), morePolicies,
			`:27: RemediationPolicy general: spec.steps[1] is a Fence step: it needs the outofservice controller`},
		{"a policy among the workloads", replace("remediationPolicies:\n", "workloads:\n- {apiVersion: nodeshepherd.io/v1alpha1, kind: RemediationPolicy, metadata: {name: x}, spec: {}}\nremediationPolicies:\n"), morePolicies,
			`:12: a RemediationPolicy is not a workload: list it under remediationPolicies`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writePolicyScenario(t, tc.text, tc.more)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.Contains(line, filepath.Dir(path)) {
					t.Errorf("error line without its file: %q", line)
				}
			}
		})
	}
}

// A scenario with policies runs the remediation controller and drain (its
// Drain steps) with the fake cloud provider, in nodeshepherd's run and in
// companion mode.
func TestControllersWithRemediation(t *testing.T) {
	for _, companion := range []bool{false, true} {
		cfg := controllers.Default()
		var names []string
		var err error
		if companion {
			_, names, err = companionControllers(&cfg, true)
		} else {
			_, names, err = nodeShepherdControllers(&cfg, false, true)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, remediation.Name) || !slices.Contains(names, drain.Name) || cfg.CloudNodeLifecycle.Cloud.Name != "fake" {
			t.Errorf("companion %v: controllers %v, cloud provider %q", companion, names, cfg.CloudNodeLifecycle.Cloud.Name)
		}
	}
	cfg := controllers.Default()
	_, names, err := nodeShepherdControllers(&cfg, false, false)
	if err != nil || slices.Contains(names, remediation.Name) || cfg.CloudNodeLifecycle.Cloud.Name != "" {
		t.Errorf("without policies: %v, %q, %v", names, cfg.CloudNodeLifecycle.Cloud.Name, err)
	}
}

// The scenario file has no say in the CRD: the one simulate installs is
// the controller's own.
func TestRemediationCRDIsTheControllers(t *testing.T) {
	if len(rem.CRD) == 0 || !strings.Contains(string(rem.CRD), "remediationpolicies") {
		t.Fatal("remediation.CRD is empty")
	}
}

// YAML anchors are the anchored values: two policies may share a ladder.
func TestPoliciesWithAnchors(t *testing.T) {
	text := strings.Replace(policyScenario, "    steps:\n    - action: Taint", "    steps: &ladder\n    - action: Taint", 1)
	text = strings.Replace(text, "- file: more-policies.yaml\n", `- apiVersion: nodeshepherd.io/v1alpha1
  kind: RemediationPolicy
  metadata: {name: other}
  spec: {unhealthy: [{type: X, status: "True", for: 1m}], healthyHold: 60s, steps: *ladder}
`, 1)
	sc, err := Load(writePolicyScenario(t, text, morePolicies))
	if err != nil {
		t.Fatal(err)
	}
	if ps := sc.policies(); len(ps) != 2 || len(ps[1].policy.Spec.Steps) != 2 || ps[1].policy.Spec.Steps[1].Action != rem.ActionReboot {
		t.Errorf("policies %+v", ps)
	}
}

// --chaos-seed refuses policies that reboot or replace machines: the
// checker's ground truth knows the timeline's faults only.
func TestCheckChaosRefusesRepairs(t *testing.T) {
	sc, err := Load(writePolicyScenario(t, policyScenario, morePolicies))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.CheckChaos(); err == nil || !strings.Contains(err.Error(), "reboot, replace or power off machines") {
		t.Errorf("CheckChaos: %v", err)
	}
}

// A policy with one invalid field is refused with that field's error and
// nothing else: its Reboot steps are not taken for missing, so the
// machines' timing is not called unused (issue 46 point 7).
func TestInvalidPolicyGivesOnlyItsError(t *testing.T) {
	text := strings.Replace(strings.Replace(policyScenario, "timeout: 90s", "timeout: 30s", 1), "- file: more-policies.yaml\n", "", 1)
	_, err := Load(writePolicyScenario(t, text, morePolicies))
	if err == nil {
		t.Fatal("an invalid policy accepted")
	}
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "spec.steps[0].timeout") {
		t.Errorf("errors %q, want only spec.steps[0].timeout's", lines)
	}
}

// applyScenario edits its policy mid-run: a Reboot inserted before the
// Taint step.
const applyScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: edit
duration: 4m
maxTimeScale: 5
cluster:
  zones: [{name: zone-a, nodes: 3}]
  node: {labels: {pool: general}}
remediationPolicies:
- apiVersion: nodeshepherd.io/v1alpha1
  kind: RemediationPolicy
  metadata: {name: general}
  spec:
    unhealthy: [{type: KernelDeadlock, status: "True", for: 20s}]
    healthyHold: 60s
    steps:
    - {action: Taint, timeout: 5m, taint: {key: k, effect: NoSchedule}}
timeline:
- {at: 30s, action: set-condition, condition: KernelDeadlock=True, nodes: [fake-node-0000]}
- at: 1m
  action: apply-policy
  policy:
    apiVersion: nodeshepherd.io/v1alpha1
    kind: RemediationPolicy
    metadata: {name: general}
    spec:
      unhealthy: [{type: KernelDeadlock, status: "True", for: 20s}]
      healthyHold: 60s
      steps:
      - {action: Reboot, timeout: 3m}
      - {action: Taint, timeout: 5m, taint: {key: k, effect: NoSchedule}}
expect:
- {metric: repairStepsMoved, atLeast: 1}
`

// TestApplyPolicyStep: an apply-policy step carries the policy's new
// version, checked as remediationPolicies' are (its Reboot counts: the
// machines' timing is taken); its errors name file:line.
func TestApplyPolicyStep(t *testing.T) {
	sc, err := Load(writePolicyScenario(t, applyScenario, morePolicies))
	if err != nil {
		t.Fatal(err)
	}
	st := sc.Timeline[1]
	if got := st.String(); got != "apply-policy general (steps Reboot, Taint)" {
		t.Errorf("step %q", got)
	}
	if len(sc.allPolicies()) != 2 || !sc.hasRepairSteps() || sc.PolicyCount() != 1 {
		t.Errorf("policies: all %d, repair steps %v, created %d", len(sc.allPolicies()), sc.hasRepairSteps(), sc.PolicyCount())
	}
	if sc.recoveryAtForTest() != 30*time.Second {
		t.Errorf("the edit counted as a fault: recovery at %v", sc.recoveryAtForTest())
	}
	replace := func(old, new string) string {
		if !strings.Contains(applyScenario, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(applyScenario, old, new, 1)
	}
	cases := []struct{ name, text, more, want string }{
		{"another policy", replace("    metadata: {name: general}\n    spec:\n      unhealthy", "    metadata: {name: gpu}\n    spec:\n      unhealthy"), morePolicies,
			`:23: timeline[1] (apply-policy): RemediationPolicy "gpu" is not one of the scenario's remediationPolicies (general): apply-policy edits one of them`},
		{"no policy", replace("  policy:\n", "  polcy:\n"), morePolicies, `:22: field polcy not found`},
		{"missing policy", applyScenario[:strings.Index(applyScenario, "  policy:\n")] + "expect:\n- {metric: repairStepsMoved, atLeast: 1}\n", morePolicies,
			`:20: timeline[1] (apply-policy): give policy: the policy's new version`},
		{"nodes", replace("  action: apply-policy\n", "  action: apply-policy\n  nodes: [fake-node-0000]\n"), morePolicies,
			`:20: timeline[1] (apply-policy): apply-policy takes policy: only`},
		{"policy on a partition", replace("{at: 30s, action: set-condition, condition: KernelDeadlock=True,", "{at: 30s, action: partition, policy: {file: x.yaml},"), morePolicies,
			`:19: timeline[0] (partition): policy: only the apply-policy action takes it`},
		{"bad field", replace("      - {action: Reboot, timeout: 3m}", "      - {action: Reboot, timeot: 3m}"), morePolicies,
			`:30: timeline[1] (apply-policy): policy: spec.steps[0].timeot: unknown field`},
		{"two documents", applyScenario[:strings.Index(applyScenario, "  policy:\n")] + "  policy: {file: more-policies.yaml}\n", morePolicies,
			`more-policies.yaml holds 2 RemediationPolicies; apply-policy takes one`},
		{"scale", replace("      - {action: Reboot, timeout: 3m}", "      - {action: Reboot, timeout: 30s}"), morePolicies,
			`must be at least 1m1s`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writePolicyScenario(t, tc.text, tc.more)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.Contains(line, filepath.Dir(path)) {
					t.Errorf("error line without its file: %q", line)
				}
			}
		})
	}
}

func (s *Scenario) recoveryAtForTest() time.Duration {
	r := &runner{sc: s}
	return r.recoveryAt()
}

// The fence examples: both run outofservice (a Fence step needs it); only
// the running one's fake cloud ignores power-off requests.
func TestFenceScenarios(t *testing.T) {
	for file, ignore := range map[string]bool{"remediation-fence-running.yaml": true, "remediation-fence-powered-off.yaml": false} {
		sc, err := Load(filepath.Join("../../examples/scenarios", file))
		if err != nil {
			t.Fatal(err)
		}
		if !sc.hasFenceSteps() || !sc.runsOutOfService() || sc.fakeNodeConfig(2).IgnorePowerOff != ignore {
			t.Errorf("%s: fence steps %v, outofservice %v, ignorePowerOff %v (want %v)", file, sc.hasFenceSteps(), sc.runsOutOfService(), sc.fakeNodeConfig(2).IgnorePowerOff, ignore)
		}
	}
}
