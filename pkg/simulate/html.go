package simulate

import (
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"os"
	"strings"
)

//go:embed report.html.tmpl
var reportTemplate string

// The charts are SVG drawn here, so the page needs no script library and
// works offline; the page's one small script only checks itself.

type point struct{ x, y float64 }

type series struct {
	Name   string
	Color  string
	Dashed bool
	points []point
}

type chart struct {
	Title  string
	YLabel string
	SVG    template.HTML
	Series []series
}

const (
	chartW, chartH                  = 920.0, 230.0
	padL, padR, padT, padB          = 48.0, 16.0, 14.0, 30.0
	colorGood, colorBad, colorWarn  = "#2e7d32", "#c62828", "#ef6c00"
	colorInfo, colorOther, colorSec = "#1565c0", "#6a1b9a", "#00838f"
)

// runStyle makes the upstream run dashed and, when runs share a chart,
// names the run in the legend.
func runStyle(r *RunResult, name, color string, runs int) series {
	s := series{Name: name, Color: color, Dashed: r.Mode == ModeUpstream}
	if runs > 1 {
		s.Name += " (" + r.Mode + ")"
	}
	return s
}

// niceStep picks a round tick step for a range.
func niceStep(span float64, ticks int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(ticks)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// timeStep picks a tick step in seconds that reads well as a duration.
func timeStep(span float64) float64 {
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200} {
		if span/s <= 10 {
			return s
		}
	}
	return 14400
}

func fmtTick(s float64) string {
	if s == 0 {
		return "0"
	}
	// 1m0s reads as 1m, 1h0m0s as 1h; 30s and 1m30s stay.
	out := secondsDuration(s).String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// render draws the chart's series as step lines, with the timeline's marks.
func (c *chart) render(xmax float64, marks []Mark) {
	ymax := 1.0
	for _, s := range c.Series {
		for _, p := range s.points {
			ymax = math.Max(ymax, p.y)
		}
	}
	ystep := math.Max(1, niceStep(ymax, 4))
	ymax = math.Ceil(ymax/ystep) * ystep
	if xmax <= 0 {
		xmax = 1
	}
	x := func(v float64) float64 { return padL + v/xmax*(chartW-padL-padR) }
	y := func(v float64) float64 { return chartH - padB - v/ymax*(chartH-padT-padB) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" width="100%%" role="img" aria-label="%s">`, chartW, chartH, template.HTMLEscapeString(c.Title))
	for v := 0.0; v <= ymax+1e-9; v += ystep {
		fmt.Fprintf(&b, `<line class="grid" x1="%g" x2="%g" y1="%.1f" y2="%.1f"/><text class="ytick" x="%g" y="%.1f">%g</text>`,
			padL, chartW-padR, y(v), y(v), padL-6, y(v)+4, v)
	}
	tstep := timeStep(xmax)
	for v := 0.0; v <= xmax+1e-9; v += tstep {
		fmt.Fprintf(&b, `<text class="xtick" x="%.1f" y="%g">%s</text>`, x(v), chartH-padB+16, fmtTick(v))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%g" x2="%g" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y(0), y(0))
	for i, m := range marks {
		fmt.Fprintf(&b, `<g class="mark"><title>%s %s</title><line x1="%.1f" x2="%.1f" y1="%g" y2="%.1f"/><text x="%.1f" y="%g">%d</text></g>`,
			fmtDuration(secondsDuration(m.T)), template.HTMLEscapeString(m.Text), x(m.T), x(m.T), padT, y(0), x(m.T)+3, padT+9, i+1)
	}
	for _, s := range c.Series {
		var pts strings.Builder
		prev := math.NaN()
		for _, p := range s.points {
			if !math.IsNaN(prev) {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(p.x), y(prev))
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(p.x), y(p.y))
			prev = p.y
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`,
			s.Color, dash, strings.TrimSpace(pts.String()), template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	c.SVG = template.HTML(b.String())
}

// charts builds every chart of the report; comparing runs share each chart.
func (rep *Report) charts() []chart {
	var zones []string
	seen := map[string]bool{}
	xmax := rep.Duration.Seconds()
	runs := rep.chartRuns()
	for _, r := range runs {
		for _, z := range r.Zones {
			if !seen[z] {
				seen[z] = true
				zones = append(zones, z)
			}
		}
		if n := len(r.Samples); n > 0 {
			xmax = math.Max(xmax, r.Samples[n-1].T)
		}
	}
	build := func(title, ylabel string, defs ...struct {
		name, color string
		value       func(Sample) int
	}) chart {
		c := chart{Title: title, YLabel: ylabel}
		for _, r := range runs {
			for _, d := range defs {
				s := runStyle(r, d.name, d.color, len(runs))
				for _, smp := range r.Samples {
					s.points = append(s.points, point{smp.T, float64(d.value(smp))})
				}
				c.Series = append(c.Series, s)
			}
		}
		return c
	}
	type def = struct {
		name, color string
		value       func(Sample) int
	}
	out := []chart{
		build("Pods", "pods",
			def{"Ready", colorGood, func(s Sample) int { return s.PodsReady }},
			def{"NotReady", colorBad, func(s Sample) int { return s.PodsNotReady }},
			def{"Pending", colorWarn, func(s Sample) int { return s.PodsPending }}),
		build("Taints and cordons", "nodes",
			def{"NoExecute (not-ready/unreachable)", colorBad, func(s Sample) int { return s.NoExecute }},
			def{"NoSchedule by condition", colorWarn, func(s Sample) int { return s.NoSchedule }},
			def{"cordoned", colorOther, func(s Sample) int { return s.Cordoned }}),
		build("Evictions and preemptions (cumulative)", "pods",
			def{"evicted by taints", colorBad, func(s Sample) int { return s.Evicted }},
			def{"preempted", colorInfo, func(s Sample) int { return s.Preempted }}),
		build("Drains (cumulative)", "count",
			def{"pods evicted by drains", colorOther, func(s Sample) int { return s.DrainEvicted }},
			def{"drains finished", colorSec, func(s Sample) int { return s.DrainsDone }}),
	}
	services := false
	for _, r := range runs {
		services = services || len(r.Services) > 0
	}
	if services {
		out = append(out, build("Service endpoints", "ready endpoints",
			def{"ready endpoints of the scenario's Services", colorGood, func(s Sample) int { return s.ServiceEndpoints }}))
	}
	stateful, outOfService := false, false
	for _, r := range runs {
		for _, smp := range r.Samples {
			stateful = stateful || smp.Replicas > 0
			outOfService = outOfService || smp.OutOfService > 0
		}
	}
	if outOfService {
		// The taints chart is the second; the series is drawn only when a run had the taint.
		taints := &out[1]
		for _, r := range runs {
			s := runStyle(r, "out-of-service", colorInfo, len(runs))
			for _, smp := range r.Samples {
				s.points = append(s.points, point{smp.T, float64(smp.OutOfService)})
			}
			taints.Series = append(taints.Series, s)
		}
	}
	if rep.shows("repairsDone") {
		out = append(out, build("Repairs (remediation policies)", "nodes",
			def{"in repair", colorWarn, func(s Sample) int { return s.InRepair }},
			def{"repairs done (cumulative)", colorGood, func(s Sample) int { return s.RepairsDone }},
			def{"rebooted (cumulative)", colorInfo, func(s Sample) int { return s.Rebooted }},
			def{"replaced (cumulative)", colorOther, func(s Sample) int { return s.Replaced }}))
	}
	if stateful {
		out = append(out, build("StatefulSet replicas and their volumes", "pods",
			def{"replicas Running with volumes attached to their node", colorGood, func(s Sample) int { return s.ReplicasWithVolumes }},
			def{"pods Terminating (deletion not confirmed)", colorBad, func(s Sample) int { return s.PodsTerminating }}))
	}
	for _, z := range zones {
		out = append(out, build("Nodes in "+z, "nodes",
			def{"Ready", colorGood, func(s Sample) int { return s.ZoneReady[z] }},
			def{"NotReady", colorBad, func(s Sample) int { return s.ZoneNotReady[z] }}))
	}
	var marks []Mark
	if len(runs) > 0 {
		marks = runs[0].Marks
	}
	for i := range out {
		out[i].render(xmax, marks)
	}
	return out
}

// chartRuns are the runs the charts draw: the first trial of each mode, as
// lines of every trial on one chart would hide each other.
func (rep *Report) chartRuns() []*RunResult {
	var out []*RunResult
	seen := map[string]bool{}
	for _, r := range rep.Runs {
		if !seen[r.Mode] {
			seen[r.Mode] = true
			out = append(out, r)
		}
	}
	return out
}

// measureRow is one line of the report's table.
type measureRow struct {
	Title, Help string
	Values      []string
}

// WriteHTML writes the self-contained report page.
func (rep *Report) WriteHTML(path string) error {
	tmpl, err := template.New("report").Parse(reportTemplate)
	if err != nil {
		return err
	}
	sums := Summarize(rep.Runs)
	var rows, trialRows []measureRow
	for i := range Measures {
		m := &Measures[i]
		if !rep.shows(m.Name) {
			continue
		}
		row := measureRow{Title: m.Title, Help: m.Name + ": " + m.Help}
		trialRow := row
		for _, s := range sums {
			st := s.Measures[m.Name]
			if rep.trials() {
				row.Values = append(row.Values, formatStat(m, st))
			} else {
				row.Values = append(row.Values, formatValue(m, st.Median))
			}
		}
		for _, r := range rep.Runs {
			trialRow.Values = append(trialRow.Values, formatValue(m, r.Measures[m.Name]))
		}
		rows, trialRows = append(rows, row), append(trialRows, trialRow)
	}
	type checkRow struct {
		Mode, Expectation, Got, Trials string
		Passed                         bool
	}
	var checks []checkRow
	for _, s := range sums {
		for _, e := range s.Expectations {
			m := measure(e.Metric)
			c := checkRow{Mode: s.Mode, Expectation: e.Expectation, Got: formatValue(m, e.Got.Median), Passed: e.Held()}
			if rep.trials() {
				c.Got, c.Trials = formatStat(m, e.Got), fmt.Sprintf("%d/%d", e.Passed, e.Trials)
			}
			checks = append(checks, c)
		}
	}
	var trialsPassed []string
	for _, s := range sums {
		trialsPassed = append(trialsPassed, fmt.Sprintf("%s %d/%d", s.Mode, s.TrialsPassed, s.Trials))
	}
	var runNames []string
	for _, r := range rep.Runs {
		runNames = append(runNames, fmt.Sprintf("%s #%d", r.Mode, r.Trial))
	}
	settingModes, settings, settingNotes := rep.settingsTable()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return tmpl.Execute(f, map[string]any{
		"R": rep, "Sums": sums, "Rows": rows, "TrialRows": trialRows, "RunNames": runNames, "Checks": checks,
		"Checked": checkedRuns(rep.Runs), "Charts": rep.charts(), "SettingModes": settingModes, "Settings": settings, "SettingNotes": settingNotes, "Failed": rep.Failed(), "Multi": rep.trials(), "TrialsPassed": strings.Join(trialsPassed, ", "),
	})
}

// checkedRuns are the runs the checker watched (--chaos-seed).
func checkedRuns(runs []*RunResult) []*RunResult {
	var out []*RunResult
	for _, r := range runs {
		if r.Checker != nil {
			out = append(out, r)
		}
	}
	return out
}
