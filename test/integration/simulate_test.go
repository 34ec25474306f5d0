package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// scenarioRuns says how CI runs each example scenario besides its time
// scale: compared with upstream where the scenario has upstream expectations
// (for the scenarios of recordedUpstream, with upstream's recorded run).
// Every example runs at the largest time scale it claims (its maxTimeScale).
var scenarioRuns = map[string][]string{
	"network-blip.yaml":     {"--compare=upstream"},
	"node-failure.yaml":     {"--compare=upstream"},
	"zone-outage.yaml":      {},
	"all-zones-down.yaml":   {},
	"kernel-deadlock.yaml":  {"--compare=upstream"},
	"preemption-burst.yaml": {"--compare=upstream"},
	// Static stability: Service endpoints kept (nodeshepherd), dropped to zero (upstream).
	"control-plane-partition.yaml": {"--compare=upstream"},
	// Issue #20, at 2: kube-controller-manager's pod GC looks every 20 s of real time, unscaled.
	"dead-node-statefulset.yaml": {"--compare=upstream"},
	// Companion mode: readinessrestore next to kube-controller-manager's node lifecycle.
	"companion-readiness-restore.yaml": {},
	// Issue 32: a drain a 1-replica PodDisruptionBudget blocks, with move-before-evict (drained,
	// 0 s without a ready endpoint) and without (blocked to the end). Upstream has no such drain.
	"move-before-evict.yaml":     {},
	"move-before-evict-off.yaml": {},
	// Issue 33: remediation policies (reboot, replace, brakes, flapping); upstream repairs nothing.
	"remediation-reboot.yaml":   {"--compare=upstream"},
	"remediation-replace.yaml":  {"--compare=upstream"},
	"remediation-brakes.yaml":   {"--compare=upstream"},
	"remediation-flapping.yaml": {"--compare=upstream"},
	// Issue 46 point 8: planned reboots, drained then rebooted one at a time.
	"planned-reboot.yaml": {},
	// Issue 46: a Fence step vetoed (the machine runs) and confirmed (powered off: the replica
	// moves); a policy edited mid-ladder (apply-policy). Upstream has no policies.
	"remediation-fence-running.yaml":     {},
	"remediation-fence-powered-off.yaml": {},
	"remediation-edit-mid-ladder.yaml":   {},
	// Issue 46 point 7: a hung kubelet repaired by the reboot alone (the fresh boot starts a
	// fresh kubelet).
	"remediation-hung-kubelet.yaml": {},
	// Issue 48: fake DRA devices; a GPU node dies, the trainers' replacements get the spare
	// node's GPUs, with kube-scheduler as with nodeshepherd's.
	"gpu-node-failure.yaml": {"--compare=upstream"},
}

// exampleArgs are simulate's flags for an example scenario: its largest
// time scale, then scenarioRuns'.
func exampleArgs(t *testing.T, f string) ([]string, float64) {
	t.Helper()
	sc, err := simulate.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if sc.MaxTimeScale == 0 {
		t.Fatalf("%s states no maxTimeScale: say the largest --time-scale its expectations hold at (make test runs it there)", f)
	}
	return append([]string{fmt.Sprintf("--time-scale=%g", sc.MaxTimeScale)}, scenarioRuns[filepath.Base(f)]...), sc.MaxTimeScale
}

// TestExampleScenarios runs every scenario of examples/scenarios with its
// expectations, and checks one HTML report in headless Chromium.
func TestExampleScenarios(t *testing.T) {
	files, err := filepath.Glob("../../examples/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example scenarios: %v", err)
	}
	for _, f := range files {
		if _, ok := scenarioRuns[filepath.Base(f)]; !ok {
			t.Errorf("%s is not in scenarioRuns: say how CI runs it", f)
		}
	}
	bin := framework.Binary(t)
	for _, f := range files {
		if _, ok := scenarioRuns[filepath.Base(f)]; !ok || *updateScenarioGolden && !recordedUpstream[filepath.Base(f)] {
			continue // make golden-scenarios runs only what it records
		}
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			args, scale := exampleArgs(t, f)
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			runArgs := args
			recorded := recordedUpstream[filepath.Base(f)] && !*updateScenarioGolden
			if recorded {
				// nodeshepherd's run only; upstream's is checked from the recording.
				runArgs = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--compare=upstream" })
				checkRecordedUpstream(t, f, args)
			}
			cmd := framework.CommandContext(ctx, bin, append([]string{"simulate", f, "-o", dir}, runArgs...)...)
			out, err := cmd.CombinedOutput()
			t.Logf("simulate %s %v:\n%s", f, runArgs, summary(out))
			if err != nil {
				t.Fatalf("simulate failed: %v (logs in %s)", err, dir)
			}
			rep := readReport(t, dir)
			wantRuns := 1
			if slices.Contains(runArgs, "--compare=upstream") {
				wantRuns = 2
			}
			if len(rep.Runs) != wantRuns {
				t.Fatalf("%d runs in the report, want %d", len(rep.Runs), wantRuns)
			}
			checked := 0
			for _, r := range rep.Runs {
				for _, c := range r.Expectations {
					checked++
					if !c.Passed {
						t.Errorf("%s: expectation %s failed", r.Mode, c.Expectation)
					}
				}
				if len(r.Samples) < 100 {
					t.Errorf("%s: only %d samples for the charts", r.Mode, len(r.Samples))
				}
			}
			if checked == 0 {
				t.Error("the scenario checked no expectation")
			}
			if rep.TimeScale != scale {
				t.Errorf("report's time scale %v, want the scenario's maxTimeScale %v", rep.TimeScale, scale)
			}
			if filepath.Base(f) == "network-blip.yaml" {
				checkHTMLInChromium(t, filepath.Join(dir, "report.html"), 2)
			}
			if recordedUpstream[filepath.Base(f)] && *updateScenarioGolden && !t.Failed() {
				recordUpstream(t, f, args, rep)
			}
		})
	}
}

// summary keeps the report part of simulate's output.
func summary(out []byte) string {
	if i := bytes.Index(out, []byte("\nScenario ")); i >= 0 {
		return string(out[i:])
	}
	return string(out)
}

func readReport(t *testing.T, dir string) *simulate.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep simulate.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	return &rep
}

// chromiumArgs start Chromium headless without any network traffic of its own.
var chromiumArgs = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"}

// checkHTMLInChromium loads the report in headless Chromium: the page's own
// check must find every chart drawn and no script error, and a screenshot
// is taken (kept next to the test's logs).
func checkHTMLInChromium(t *testing.T, page string, runs int) {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is missing: 'make chromium' installs Debian's package (make test does it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "file://" + page
	dom, err := framework.CommandContext(ctx, chromium, append(chromiumArgs, "--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	body := regexp.MustCompile(`<body[^>]*>`).Find(dom)
	attr := func(name string) string {
		m := regexp.MustCompile(name + `="([^"]*)"`).FindSubmatch(body)
		if m == nil {
			return ""
		}
		return string(m[1])
	}
	t.Logf("report page in chromium: %s", body)
	if attr("data-charts") == "" || attr("data-charts") == "0" || attr("data-charts-drawn") != attr("data-charts") {
		t.Errorf("charts drawn %q of %q: the page's self-check failed", attr("data-charts-drawn"), attr("data-charts"))
	}
	if e := attr("data-errors"); e != "" {
		t.Errorf("script errors on the page: %s", e)
	}
	if n := bytes.Count(dom, []byte(`class="series"`)); n < runs*2 {
		t.Errorf("only %d chart lines in the page", n)
	}
	if bytes.Contains(dom, []byte("http://")) || bytes.Contains(dom, []byte("https://")) {
		t.Error("the report refers to the network; it must be self-contained")
	}
	// Kept after the test for a look, under a name of its own: two runs at
	// once must not write one file.
	f, err := os.CreateTemp("", "nodeshepherd-simulate-report-*.png")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	shot := f.Name()
	if out, err := framework.CommandContext(ctx, chromium, append(chromiumArgs, "--user-data-dir="+t.TempDir(), "--window-size=1000,2600",
		"--screenshot="+shot, url)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v: %s", err, out)
	}
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 20_000 {
		t.Fatalf("screenshot %s missing or blank: %v", shot, err)
	}
	t.Logf("screenshot of the report: %s (%d bytes)", shot, st.Size())
}

// TestSimulateInterruptStopsCleanly sends Ctrl-C in the middle of the
// timeline: the run stops, the report of what was recorded is written, and
// no control-plane process is left.
func TestSimulateInterruptStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	var out lockedBuffer
	cmd := framework.Command(framework.Binary(t), "simulate", "../../examples/scenarios/node-failure.yaml", "--time-scale=10", "-o", dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	framework.Eventually(t, 3*time.Minute, "the timeline to start", func(context.Context) (bool, string, error) {
		return strings.Contains(out.String(), "▶ partition"), out.String(), nil
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("exit after Ctrl-C: %v, want code 1", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("simulate did not stop within a minute of Ctrl-C:\n%s", out.String())
	}
	t.Logf("output:\n%s", out.String())
	if !strings.Contains(out.String(), "interrupted") {
		t.Error("the output does not say the run was interrupted")
	}
	rep := readReport(t, dir)
	if len(rep.Runs) != 1 || !rep.Runs[0].Interrupted {
		t.Errorf("report runs %d, interrupted %v", len(rep.Runs), len(rep.Runs) == 1 && rep.Runs[0].Interrupted)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Error(err)
	}
	if left, _ := framework.Command("pgrep", "-f", dir).Output(); len(bytes.TrimSpace(left)) > 0 {
		t.Errorf("processes left behind: %s", left)
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a process writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// trialsScenario is a small scenario with a Service: two nodes, a kubelet
// restart, a minute of cluster time.
const trialsScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: trials
duration: 1m
cluster:
  zones:
  - {name: zone-a, nodes: 2}
  node: {cpu: "4", memory: 8Gi}
workloads:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: app}
  spec:
    replicas: 4
    selector: {matchLabels: {app: app}}
    template:
      metadata: {labels: {app: app}}
      spec:
        containers: [{name: app, image: registry.k8s.io/pause:3.10}]
- apiVersion: v1
  kind: Service
  metadata: {name: app}
  spec:
    selector: {app: app}
    ports: [{port: 80}]
timeline:
- at: 10s
  action: kubelet-restart
  nodes: [fake-node-0000]
expect:
- {metric: serviceReadyEndpointsMin, atLeast: 4}
- {metric: serviceReadyEndpointsAtEnd, atLeast: 4}
- {metric: podsEvicted, atMost: 0}
`

// TestSimulateTrials runs a small scenario twice (--trials 2): a progress
// line per trial, a log directory per trial, every trial's figures and the
// median and range of each measure in report.json and on the terminal, the
// Service endpoints counted; --trials 0 is a usage error.
func TestSimulateTrials(t *testing.T) {
	bin := framework.Binary(t)
	scenario := filepath.Join(t.TempDir(), "trials.yaml")
	if err := os.WriteFile(scenario, []byte(trialsScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := framework.Command(bin, "simulate", scenario, "--trials", "0").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--trials must be at least 1, got 0") {
		t.Errorf("--trials 0: %v, want exit 2 naming the flag: %s", err, out)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err = framework.CommandContext(ctx, bin, "simulate", scenario, "--trials=2", "--time-scale=10", "-o", dir).CombinedOutput()
	t.Logf("simulate --trials 2:\n%s", out)
	if err != nil {
		t.Fatalf("simulate failed: %v (logs in %s)", err, dir)
	}
	for _, want := range []string{"=== trial 1/2: nodeshepherd", "=== trial 2/2: nodeshepherd done: 3 of 3 expectations hold",
		"[nodeshepherd #2]", "NODESHEPHERD median (min–max)", "PASS   2/2   serviceReadyEndpointsMin ≥ 4",
		"Trials where every expectation held: nodeshepherd 2/2.", "All 3 expectations hold in every trial."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, sub := range []string{"nodeshepherd-1/logs", "nodeshepherd-2/logs"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("per-trial logs: %v", err)
		}
	}
	rep := readReport(t, dir)
	if rep.Trials != 2 || len(rep.Runs) != 2 || rep.Runs[0].Trial != 1 || rep.Runs[1].Trial != 2 {
		t.Fatalf("report: trials %d, %d runs", rep.Trials, len(rep.Runs))
	}
	if len(rep.Summary) != 1 || rep.Summary[0].Trials != 2 || rep.Summary[0].TrialsPassed != 2 {
		t.Fatalf("report summary: %+v", rep.Summary)
	}
	for _, r := range rep.Runs {
		if !slices.Equal(r.Services, []string{"default/app"}) {
			t.Errorf("trial %d: services %v", r.Trial, r.Services)
		}
		if len(r.Samples) == 0 || r.Samples[0].ServiceEndpoints != 4 {
			t.Errorf("trial %d: the first sample does not have the 4 endpoints", r.Trial)
		}
	}
	st := rep.Summary[0].Measures["serviceReadyEndpointsMin"]
	if len(st.Values) != 2 || st.Values[0] == nil || *st.Values[0] != 4 || st.Median == nil || *st.Median != 4 {
		t.Errorf("serviceReadyEndpointsMin over trials: %+v", st)
	}
	if d := rep.Summary[0].Measures["timeToDetect"]; len(d.Values) != 2 {
		t.Errorf("timeToDetect over trials: %+v", d)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(page), "Every trial") || !strings.Contains(string(page), "Service endpoints") {
		t.Errorf("report.html lacks the per-trial table or the endpoints chart: %v", err)
	}
}

// settingsScenario sets the scheduler's timings: at time scale 10 they are
// 200ms / 2s backoffs (whole seconds for kube-scheduler: 1s / 2s, so both
// runs use those) and a 12s unschedulable timeout.
const settingsScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
name: settings
duration: 20s
controllers:
  scheduler: {podInitialBackoff: 2s, podMaxBackoff: 20s, podMaxInUnschedulablePodsDuration: 2m}
  nodeLifecycle: {nodeMonitorGracePeriod: 30s}
cluster:
  zones:
  - {name: zone-a, nodes: 2}
  node: {cpu: "4", memory: 8Gi}
workloads:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: app}
  spec:
    replicas: 2
    selector: {matchLabels: {app: app}}
    template:
      metadata: {labels: {app: app}}
      spec:
        containers: [{name: app, image: registry.k8s.io/pause:3.10}]
timeline:
- {at: 5s, action: cordon, nodes: [fake-node-0001], for: 10s}
expect:
- {metric: podsEvicted, atMost: 0, run: both}
`

// TestSimulateCompareUpstreamSettings: with --compare upstream, kube-scheduler
// runs with a configuration file holding nodeshepherd's time-scaled
// scheduler settings and client limits (the run reads them back from its
// /configz), and the report states both runs' settings side by side.
func TestSimulateCompareUpstreamSettings(t *testing.T) {
	bin := framework.Binary(t)
	scenario := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(scenario, []byte(settingsScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := framework.CommandContext(ctx, bin, "simulate", scenario, "--compare=upstream", "--time-scale=10", "-o", dir).CombinedOutput()
	t.Logf("simulate --compare upstream:\n%s", summary(out))
	if err != nil {
		t.Fatalf("simulate failed: %v (logs in %s)\n%s", err, dir, out)
	}
	for _, re := range []string{
		`SETTING \(cluster time\) +NODESHEPHERD +UPSTREAM\n`,
		`client QPS / burst +50 / 100, shared +50 / 100, each\n`,
		`scheduler pod initial / max backoff +10s / 20s +10s / 20s\n`,
		`unschedulable pods retried after +2m0s +2m0s\n`,
		`node monitor / startup grace period +30s / 1m0s +30s / 1m0s\n`,
		`\* scheduler pod initial / max backoff: the scenario asked 2s / 20s; kube-scheduler's backoffs are whole seconds`,
		`\* upstream: kube-scheduler's backoffs and client limits read back from its /configz`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("output lacks %s", re)
		}
	}
	rep := readReport(t, dir)
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		settings := map[string]string{}
		for _, s := range r.Settings {
			settings[s.Name] = s.Value
		}
		if got := settings["scheduler pod initial / max backoff"]; got != "10s / 20s" {
			t.Errorf("%s: backoffs %q in report.json", r.Mode, got)
		}
		if checked := r.SettingsChecked; (r.Mode == simulate.RunUpstream) != strings.Contains(checked, "/configz") {
			t.Errorf("%s: settings checked %q", r.Mode, checked)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "upstream", "kube-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	noSecretsLeft(t, dir)
	for _, want := range []string{"podInitialBackoffSeconds: 1\n", "podMaxBackoffSeconds: 2\n", "qps: 50\n", "burst: 100\n"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("kube-scheduler's configuration lacks %q:\n%s", want, cfg)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "<h2>Settings</h2>") || !strings.Contains(string(page), "<td>unschedulable pods retried after</td>") {
		t.Error("report.html has no settings table")
	}
}

// TestSimulateKubeSchedulerUnschedulableTimeout: the upstream run passes the
// time-scaled podMaxInUnschedulablePodsDuration to kube-scheduler as its
// deprecated flag next to --config (the file format has no such field);
// kube-scheduler v1.37 must honour it. A pod no node fits sits in the
// unschedulable pool with no event to wake it, and is retried for the
// timeout (at kube-scheduler's 30 s flush) rather than after 5 minutes.
func TestSimulateKubeSchedulerUnschedulableTimeout(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{Scheduler: true, SchedulerConfig: &controlplane.SchedulerConfig{
		QPS: 50, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 1, PodMaxInUnschedulablePodsDuration: 2 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	list := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}
	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status = v1.NodeStatus{Capacity: list, Allocatable: list, Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager: the ServiceAccount admission needs the default account.
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: v1.PodSpec{NodeSelector: map[string]string{"pool": "none"},
		Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 50*time.Second, "kube-scheduler retries the unschedulable pod for its timeout", func(ctx context.Context) (bool, string, error) {
		body, err := cp.Get(ctx, controlplane.Scheduler, "/metrics")
		if err != nil {
			return false, err.Error(), nil
		}
		var queue []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "scheduler_queue_incoming_pods_total{") {
				if strings.Contains(l, `event="UnschedulableTimeout"`) {
					return true, l, nil
				}
				queue = append(queue, l)
			}
		}
		return false, strings.Join(queue, "; "), nil
	})
}

// noSecretsLeft fails if a report directory still holds a private key, a
// token file, a kubeconfig or etcd's data once simulate has ended: it is
// meant to be shared.
func noSecretsLeft(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "etcd" {
				t.Errorf("report directory keeps etcd's data: %s", path)
			}
			return nil
		}
		if name == "tokens.csv" || strings.HasSuffix(name, ".kubeconfig") || strings.HasSuffix(name, ".key") {
			t.Errorf("report directory keeps a secret: %s", path)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("PRIVATE KEY")) {
			t.Errorf("report directory keeps a private key in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
