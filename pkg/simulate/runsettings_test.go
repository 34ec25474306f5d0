package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
)

const schedulerScenario = `apiVersion: nodeshepherd.io/v1alpha1
kind: Scenario
duration: 1m
controllers:
  nodeLifecycle: {nodeMonitorGracePeriod: 40s, nodeEvictionRate: 0.2}
  scheduler: {podInitialBackoff: 2s, podMaxBackoff: 20s, podMaxInUnschedulablePodsDuration: 2m}
cluster:
  zones: [{name: zone-a, nodes: 1}]
`

// Both runs' schedulers back off alike: nodeshepherd's time-scaled
// backoffs are rounded to kube-scheduler's whole seconds, and kube-scheduler
// gets the same values, the unschedulable timeout and the client limits.
func TestSchedulerSettingsScaledAlikeForBothRuns(t *testing.T) {
	for _, tc := range []struct {
		scenario                string
		scale                   float64
		initial, maxBackoff     time.Duration
		unschedulable           time.Duration
		wantInitial, wantMax    int64
		wantAsked, wantNotAsked string
	}{
		// kube-scheduler's defaults, 1s and 10s: 100ms and 1s at 10, 1s and 1s in whole seconds.
		{scenario: validScenario, scale: 10, unschedulable: 30 * time.Second, wantInitial: 1, wantMax: 1, wantAsked: "10s / 10s the scenario asked 1s / 10s;"},
		{scenario: validScenario, scale: 1, unschedulable: 5 * time.Minute, wantInitial: 1, wantMax: 10, wantNotAsked: "asked"},
		{scenario: schedulerScenario, scale: 2, unschedulable: time.Minute, wantInitial: 1, wantMax: 10, wantNotAsked: "asked"},
		// 20s / 3 = 6.67s: 7s.
		{scenario: schedulerScenario, scale: 3, unschedulable: 40 * time.Second, wantInitial: 1, wantMax: 7, wantAsked: "3s / 21s the scenario asked 2s / 20s;"},
	} {
		sc, err := Load(writeScenario(t, tc.scenario))
		if err != nil {
			t.Fatal(err)
		}
		cfg, kcm, err := sc.Controllers.scaled(sc.path, tc.scale)
		if err != nil {
			t.Fatal(err)
		}
		s := cfg.Scheduler
		if s.PodInitialBackoff != time.Duration(tc.wantInitial)*time.Second || s.PodMaxBackoff != time.Duration(tc.wantMax)*time.Second ||
			s.PodMaxInUnschedulablePods != tc.unschedulable {
			t.Errorf("scale %g: nodeshepherd's scheduler backoffs %v / %v, unschedulable %v", tc.scale, s.PodInitialBackoff, s.PodMaxBackoff, s.PodMaxInUnschedulablePods)
		}
		up := upstreamScheduler(cfg)
		want := controlplane.SchedulerConfig{QPS: 50, Burst: 100, PodInitialBackoffSeconds: tc.wantInitial, PodMaxBackoffSeconds: tc.wantMax,
			PodMaxInUnschedulablePodsDuration: tc.unschedulable}
		if !reflect.DeepEqual(up, want) {
			t.Errorf("scale %g: kube-scheduler %+v, want %+v", tc.scale, up, want)
		}
		if err := up.Validate(); err != nil {
			t.Error(err)
		}
		asked, _, _ := sc.Controllers.parse(sc.path)
		rows := map[string][]Setting{}
		for _, mode := range []string{ModeNodeShepherd, ModeUpstream} {
			rows[mode] = runSettings(mode, tc.scale, cfg, up, kcm, asked.Scheduler.PodInitialBackoff, asked.Scheduler.PodMaxBackoff)
		}
		for i, ns := range rows[ModeNodeShepherd] {
			u := rows[ModeUpstream][i]
			if ns.Name != u.Name {
				t.Fatalf("rows differ: %s, %s", ns.Name, u.Name)
			}
			switch ns.Name {
			case settingClient, settingFlush:
				continue // said per run
			}
			if ns != u {
				t.Errorf("scale %g: %s: nodeshepherd %q, upstream %q", tc.scale, ns.Name, ns.Value, u.Value)
			}
			if ns.Name == settingBackoff && (tc.wantAsked != "" && !strings.Contains(ns.Value+" "+ns.Note, tc.wantAsked) ||
				tc.wantNotAsked != "" && strings.Contains(ns.Note, tc.wantNotAsked)) {
				t.Errorf("scale %g: backoff row %+v", tc.scale, ns)
			}
		}
	}
}

// Both runs' kube-controller-manager have nodeshepherd's client limits.
func TestClientLimitsAlike(t *testing.T) {
	if got := kcmClientArgs(); !slices.Equal(got, []string{"--kube-api-qps=50", "--kube-api-burst=100"}) {
		t.Errorf("kube-controller-manager client flags %v", got)
	}
	sc, err := Load(writeScenario(t, validScenario))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ModeNodeShepherd, ModeUpstream} {
		r := &runner{sc: sc, opts: Options{Mode: mode, TimeScale: 10, Dir: t.TempDir()}}
		res := &RunResult{}
		lc, err := r.clusterConfig(res)
		if err != nil {
			t.Fatal(err)
		}
		args := lc.ControlPlane.ControllerManagerArgs
		if !slices.Contains(args, "--kube-api-qps=50") || !slices.Contains(args, "--kube-api-burst=100") {
			t.Errorf("%s: kube-controller-manager args %v", mode, args)
		}
		if mode == ModeUpstream {
			if sc := lc.ControlPlane.SchedulerConfig; sc == nil || sc.QPS != 50 || sc.Burst != 100 || sc.PodMaxInUnschedulablePodsDuration != 30*time.Second {
				t.Errorf("kube-scheduler config %+v", sc)
			}
			if !slices.Contains(args, "--node-monitor-grace-period=4s") {
				t.Errorf("kube-controller-manager lacks the scaled grace period: %v", args)
			}
		}
		if len(res.Settings) == 0 {
			t.Errorf("%s: no settings in the result", mode)
		}
	}
}

func settingsReport(t *testing.T) *Report {
	t.Helper()
	sc, err := Load(writeScenario(t, validScenario))
	if err != nil {
		t.Fatal(err)
	}
	cfg, kcm, err := sc.Controllers.scaled(sc.path, 10)
	if err != nil {
		t.Fatal(err)
	}
	rep := testReport()
	for _, r := range rep.Runs {
		r.Settings = runSettings(r.Mode, 10, cfg, upstreamScheduler(cfg), kcm, time.Second, 10*time.Second)
		if r.Mode == ModeUpstream {
			r.SettingsChecked = settingsCheckedFromSchedulerConfig
		}
	}
	return rep
}

func TestSettingsTableInSummaryAndHTML(t *testing.T) {
	rep := settingsReport(t)
	var b bytes.Buffer
	rep.WriteSummary(&b)
	out := b.String()
	for _, re := range []string{
		`SETTING \(cluster time\) +NODESHEPHERD +UPSTREAM`,
		`\ntime scale +10 +10\n`,
		`client QPS / burst +50 / 100, shared +50 / 100, each\n`,
		`scheduler pod initial / max backoff +10s / 10s +10s / 10s\n`,
		`unschedulable pods retried after +5m0s +5m0s\n`,
		`flushed every +10s / 10s +10s / 5m0s\n`,
		`node monitor period +5s +5s\n`,
		`node monitor / startup grace period +40s / 1m0s +40s / 1m0s\n`,
		`node eviction rate / secondary \(nodes/s\) +0.2 / 0.01 +0.2 / 0.01\n`,
		`\* scheduler pod initial / max backoff: the scenario asked 1s / 10s; kube-scheduler's backoffs are whole seconds`,
		`\* scheduler backoff / unschedulable pool flushed every: fixed in code, not time-scaled: nodeshepherd's scheduler every 1s of real time, kube-scheduler's backoff queue every 1s and unschedulable pool every 30s`,
		`\* upstream: kube-scheduler's backoffs and client limits read back from its /configz`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("summary lacks %s:\n%s", re, out)
		}
	}
	p := filepath.Join(t.TempDir(), "report.html")
	if err := rep.WriteHTML(p); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	page := string(data)
	for _, want := range []string{"<h2>Settings</h2>", "<th>nodeshepherd</th><th>upstream</th>", "<td>scheduler pod initial / max backoff</td>",
		"<li>upstream: kube-scheduler&#39;s backoffs and client limits read back from its /configz</li>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
