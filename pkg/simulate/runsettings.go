package simulate

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
)

// Client limits of every API client of both runs: nodeshepherd's process,
// kube-controller-manager (both runs) and kube-scheduler (upstream run).
// They are rates of real API traffic, so time-scaling leaves them alone.
const (
	clientQPS   = 50
	clientBurst = 100
)

// Fixed periods of the schedulers' queues (no setting changes them, so
// time-scaling cannot either): nodeshepherd's scheduler moves expired
// backoffs and timed-out unschedulable pods every second; kube-scheduler
// v1.37 flushes its backoff queue every second and its unschedulable pool
// every 30 s.
const (
	nodeshepherdQueueFlush          = time.Second
	kubeSchedulerBackoffFlush       = time.Second
	kubeSchedulerUnschedulableFlush = 30 * time.Second
)

// settingsCheckedFromSchedulerConfig is the upstream run's SettingsChecked.
const settingsCheckedFromSchedulerConfig = "kube-scheduler's backoffs and client limits read back from its /configz"

// kcmClientArgs give kube-controller-manager, in both runs, the client
// limits of nodeshepherd's process.
func kcmClientArgs() []string {
	return []string{"--kube-api-qps=" + strconv.Itoa(clientQPS), "--kube-api-burst=" + strconv.Itoa(clientBurst)}
}

// upstreamScheduler is kube-scheduler's configuration for the upstream run:
// the time-scaled settings nodeshepherd's scheduler runs with (scaled has
// made its backoffs whole seconds already) and the same client limits.
func upstreamScheduler(cfg *controllers.Config) controlplane.SchedulerConfig {
	return controlplane.SchedulerConfig{QPS: clientQPS, Burst: clientBurst,
		PodInitialBackoffSeconds:          controlplane.BackoffSeconds(cfg.Scheduler.PodInitialBackoff),
		PodMaxBackoffSeconds:              controlplane.BackoffSeconds(cfg.Scheduler.PodMaxBackoff),
		PodMaxInUnschedulablePodsDuration: cfg.Scheduler.PodMaxInUnschedulablePods}
}

// Setting is one row of a run's settings: its name and the value, in
// cluster time like every figure of the report.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Note explains the value where it is not what one would assume.
	Note string `json:"note,omitempty"`
}

// Names of the settings rows, in the order of the table.
const (
	settingTimeScale     = "time scale"
	settingClient        = "client QPS / burst"
	settingBackoff       = "scheduler pod initial / max backoff"
	settingUnschedulable = "unschedulable pods retried after"
	settingFlush         = "scheduler backoff / unschedulable pool flushed every"
	settingMonitor       = "node monitor period"
	settingGrace         = "node monitor / startup grace period"
	settingEviction      = "node eviction rate / secondary (nodes/s)"
	settingThresholds    = "large cluster size / unhealthy zone threshold"
	settingDowntime      = "fake cloud reboot / replace downtime"
)

// runSettings are the settings of one run's mode, from the time-scaled
// configuration (real time) turned back into cluster time: nodeshepherd's
// scheduler settings from cfg, kube-scheduler's from sched, and the node
// lifecycle settings both runs share from the kube-controller-manager flags
// kcm. asked are the scheduler backoffs the scenario asked for (cluster
// time), named next to the values when whole seconds changed them.
func runSettings(mode string, scale float64, cfg *controllers.Config, sched controlplane.SchedulerConfig, kcm []string, askedInitial, askedMax time.Duration) []Setting {
	cluster := func(d time.Duration) string {
		return time.Duration(float64(d) * scale).Round(time.Millisecond).String()
	}
	flags := map[string]string{}
	for _, a := range kcm {
		if name, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			flags[name] = v
		}
	}
	flagDuration := func(name string) string {
		d, err := time.ParseDuration(flags[name])
		if err != nil {
			return "-"
		}
		return cluster(d)
	}
	flagRate := func(name string) string {
		r, err := strconv.ParseFloat(flags[name], 64)
		if err != nil {
			return "-"
		}
		return strconv.FormatFloat(r/scale, 'g', 4, 64)
	}
	ts := Setting{Name: settingTimeScale, Value: "1 (real time)"}
	if scale != 1 {
		ts.Value = strconv.FormatFloat(scale, 'g', -1, 64)
		ts.Note = fmt.Sprintf("every duration was divided by %g and every eviction rate multiplied by it: real time is cluster time / %g", scale, scale)
	}
	initial, maxBackoff := cfg.Scheduler.PodInitialBackoff, cfg.Scheduler.PodMaxBackoff
	unschedulable := cfg.Scheduler.PodMaxInUnschedulablePods
	client := Setting{Name: settingClient, Value: fmt.Sprintf("%d / %d, shared", clientQPS, clientBurst),
		Note: fmt.Sprintf("nodeshepherd's controllers and scheduler share one client; kube-controller-manager's controllers (both runs) and kube-scheduler have %d / %d each", clientQPS, clientBurst)}
	flush := Setting{Name: settingFlush, Value: cluster(nodeshepherdQueueFlush) + " / " + cluster(nodeshepherdQueueFlush),
		Note: fmt.Sprintf("fixed in code, not time-scaled: nodeshepherd's scheduler every %v of real time, kube-scheduler's backoff queue every %v and unschedulable pool every %v",
			nodeshepherdQueueFlush, kubeSchedulerBackoffFlush, kubeSchedulerUnschedulableFlush)}
	if mode == ModeUpstream {
		initial, maxBackoff = time.Duration(sched.PodInitialBackoffSeconds)*time.Second, time.Duration(sched.PodMaxBackoffSeconds)*time.Second
		unschedulable = sched.PodMaxInUnschedulablePodsDuration
		client.Value = fmt.Sprintf("%g / %d, each", sched.QPS, sched.Burst)
		flush.Value = cluster(kubeSchedulerBackoffFlush) + " / " + cluster(kubeSchedulerUnschedulableFlush)
	}
	backoff := Setting{Name: settingBackoff, Value: cluster(initial) + " / " + cluster(maxBackoff)}
	if asked := askedInitial.String() + " / " + askedMax.String(); asked != backoff.Value {
		backoff.Note = fmt.Sprintf("the scenario asked %s; kube-scheduler's backoffs are whole seconds of real time, at least 1, so both runs back off %s", asked, backoff.Value)
	}
	return []Setting{
		ts,
		client,
		backoff,
		{Name: settingUnschedulable, Value: cluster(unschedulable)},
		flush,
		{Name: settingMonitor, Value: flagDuration("node-monitor-period")},
		{Name: settingGrace, Value: flagDuration("node-monitor-grace-period") + " / " + flagDuration("node-startup-grace-period")},
		{Name: settingEviction, Value: flagRate("node-eviction-rate") + " / " + flagRate("secondary-node-eviction-rate")},
		{Name: settingThresholds, Value: flags["large-cluster-size-threshold"] + " / " + flags["unhealthy-zone-threshold"]},
	}
}

// checkScheduler reads kube-scheduler's configuration back from its
// /configz: a run whose kube-scheduler ignored the file would compare
// unlike with unlike.
func (r *runner) checkScheduler(ctx context.Context, want controlplane.SchedulerConfig, res *RunResult) error {
	got, err := r.cluster.ControlPlane().SchedulerConfigz(ctx)
	if err != nil {
		return err
	}
	want.PodMaxInUnschedulablePodsDuration = 0 // not in /configz: a flag
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("kube-scheduler runs with %+v, not the configuration it was given (%+v); see %s", got, want, r.cluster.LogDir())
	}
	res.SettingsChecked = settingsCheckedFromSchedulerConfig
	return nil
}

// settingsTable is the settings of the first trial of each mode, one row
// per setting with a column per mode, and the notes on them (each once).
func (rep *Report) settingsTable() (modes []string, rows []measureRow, notes []string) {
	runs := rep.chartRuns()
	for _, r := range runs {
		modes = append(modes, r.Mode)
	}
	index := map[string]int{}
	for _, r := range runs {
		for _, s := range r.Settings {
			if _, ok := index[s.Name]; !ok {
				index[s.Name] = len(rows)
				rows = append(rows, measureRow{Title: s.Name, Values: make([]string, len(runs))})
			}
		}
	}
	for j, r := range runs {
		for _, s := range r.Settings {
			rows[index[s.Name]].Values[j] = s.Value
			if note := s.Name + ": " + s.Note; s.Note != "" && !slices.Contains(notes, note) {
				notes = append(notes, note)
			}
		}
	}
	for _, r := range runs {
		if r.SettingsChecked != "" {
			notes = append(notes, r.Mode+": "+r.SettingsChecked)
		}
	}
	for i := range rows {
		for j := range rows[i].Values {
			if rows[i].Values[j] == "" {
				rows[i].Values[j] = "-"
			}
		}
	}
	return modes, rows, notes
}
