package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of `simulate`: one run, or two when comparing.
type Report struct {
	Scenario    string    `json:"scenario"`
	Description string    `json:"description,omitempty"`
	File        string    `json:"file"`
	TimeScale   float64   `json:"timeScale"`
	Duration    Duration  `json:"duration"`
	Started     time.Time `json:"started"`
	Timeline    []string  `json:"timeline"`
	// Trials is how many times each mode ran (--trials); Runs holds every
	// run, Summary each mode over its trials.
	Trials  int           `json:"trials"`
	Runs    []*RunResult  `json:"runs"`
	Summary []ModeSummary `json:"summary"`
}

// NewReport starts a report of a scenario.
func NewReport(sc *Scenario, scale float64) *Report {
	rep := &Report{Scenario: sc.Name, Description: strings.TrimSpace(sc.Description), File: sc.path, TimeScale: scale,
		Duration: sc.Duration, Started: time.Now().UTC().Truncate(time.Second), Trials: 1}
	for _, st := range sc.Timeline {
		rep.Timeline = append(rep.Timeline, fmt.Sprintf("%s %s", fmtDuration(st.At.Duration), st.String()))
	}
	return rep
}

// Failed counts failed expectations over the runs.
func (rep *Report) Failed() int {
	n := 0
	for _, r := range rep.Runs {
		n += r.Failed()
	}
	return n
}

// Violations counts the checker's violations over nodeshepherd's runs
// (--chaos-seed); upstream's are reported, not counted: they are not
// nodeshepherd's to fix.
func (rep *Report) Violations() int {
	n := 0
	for _, r := range rep.Runs {
		if r.Checker != nil && r.Mode == ModeNodeShepherd {
			n += len(r.Checker.Violations)
		}
	}
	return n
}

// writeChecker prints each run's checker section (--chaos-seed).
func (rep *Report) writeChecker(w io.Writer) {
	for _, r := range rep.Runs {
		c := r.Checker
		if c == nil {
			continue
		}
		label := r.Mode
		if rep.trials() {
			label += fmt.Sprintf(" trial %d", r.Trial)
		}
		fmt.Fprintf(w, "\nChecker (%s; chaos seed %d, %d faults of %s; slack %gs real):\n", label, c.Seed, len(c.Faults), strings.Join(c.Kinds, ", "), c.SlackSecs)
		for _, f := range c.Faults {
			fmt.Fprintf(w, "  fault %s\n", f)
		}
		if len(c.Violations) == 0 {
			fmt.Fprintln(w, "  no invariant violated")
		}
		for _, v := range c.Violations {
			fmt.Fprintf(w, "  VIOLATION %s\n", v)
		}
		if len(c.Violations) > 0 && r.Mode != ModeNodeShepherd {
			fmt.Fprintf(w, "  (%s's violations are reported, they do not fail the run)\n", r.Mode)
		}
	}
}

// trials says whether the report aggregates repeated trials.
func (rep *Report) trials() bool { return rep.Trials > 1 }

// WriteJSON writes the report for machines.
func (rep *Report) WriteJSON(path string) error {
	rep.Summary = Summarize(rep.Runs)
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// formatValue prints a measure: a duration in cluster time, a count, or
// "never".
func formatValue(m *Measure, v *float64) string {
	switch {
	case v == nil && m.Kind == kindDuration:
		return "never"
	case v == nil:
		return "-"
	case m.Kind == kindDuration:
		return formatSeconds(*v)
	}
	return fmt.Sprintf("%d", int(math.Round(*v)))
}

func formatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// WriteSummary prints the terminal summary: the measures side by side, then
// every expectation with its outcome. Over several trials each figure is the
// median with the range, and an expectation holds only if it held in every
// trial.
func (rep *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\nScenario %s (%s): %v of cluster time", rep.Scenario, rep.File, rep.Duration.Duration)
	if rep.TimeScale != 1 {
		fmt.Fprintf(w, ", run at time scale %g (every duration divided by %g; figures below are cluster time)", rep.TimeScale, rep.TimeScale)
	}
	fmt.Fprintln(w)
	sums := Summarize(rep.Runs)
	for _, s := range sums {
		for _, r := range rep.Runs {
			if r.Mode != s.Mode {
				continue
			}
			fmt.Fprintf(w, "  %-12s %s", r.Mode+":", r.Components)
			break
		}
		if rep.trials() {
			fmt.Fprintf(w, "; %d of %d trials ran", s.Trials, rep.Trials)
		}
		for _, r := range rep.Runs {
			if r.Mode == s.Mode && r.Interrupted {
				fmt.Fprintf(w, " — trial %d INTERRUPTED, figures cover the part that ran", r.Trial)
			}
		}
		fmt.Fprintln(w)
	}
	rep.writeSettings(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "MEASURE"
	for _, s := range sums {
		header += "\t" + strings.ToUpper(s.Mode)
		if rep.trials() {
			header += " median (min–max)"
		}
	}
	fmt.Fprintln(tw, header)
	for i := range Measures {
		m := &Measures[i]
		if !rep.shows(m.Name) {
			continue
		}
		line := m.Title
		for _, s := range sums {
			if rep.trials() {
				line += "\t" + formatStat(m, s.Measures[m.Name])
			} else {
				line += "\t" + formatValue(m, s.Measures[m.Name].Median)
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	total, failed := 0, 0
	for _, s := range sums {
		if len(s.Expectations) == 0 {
			continue
		}
		if rep.trials() {
			fmt.Fprintf(w, "\nExpectations (%s; each must hold in every trial):\n", s.Mode)
		} else {
			fmt.Fprintf(w, "\nExpectations (%s):\n", s.Mode)
		}
		for _, e := range s.Expectations {
			total++
			mark := "PASS"
			if !e.Held() {
				mark, failed = "FAIL", failed+1
			}
			m := measure(e.Metric)
			if rep.trials() {
				fmt.Fprintf(w, "  %s  %2d/%-2d  %-50s got %s\n", mark, e.Passed, e.Trials, e.Expectation, formatStat(m, e.Got))
			} else {
				fmt.Fprintf(w, "  %s  %-50s got %s\n", mark, e.Expectation, formatValue(m, e.Got.Median))
			}
		}
	}
	if rep.trials() {
		var parts []string
		for _, s := range sums {
			parts = append(parts, fmt.Sprintf("%s %d/%d", s.Mode, s.TrialsPassed, s.Trials))
		}
		fmt.Fprintf(w, "\nTrials where every expectation held: %s.\n", strings.Join(parts, ", "))
	}
	rep.writeChecker(w)
	if n := rep.Violations(); n > 0 {
		fmt.Fprintf(w, "\nThe checker found %d invariant violation(s).\n", n)
	}
	every := ""
	if rep.trials() {
		every = " in every trial"
	}
	switch {
	case total == 0:
		fmt.Fprintln(w, "\nNo expectations in the scenario.")
	case failed == 0:
		fmt.Fprintf(w, "\nAll %d expectations hold%s.\n", total, every)
	default:
		fmt.Fprintf(w, "\n%d of %d expectations FAILED%s.\n", failed, total, map[bool]string{true: " in at least one trial"}[rep.trials()])
	}
}

// writeSettings prints the settings of each run side by side (cluster time).
func (rep *Report) writeSettings(w io.Writer) {
	modes, rows, notes := rep.settingsTable()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "SETTING (cluster time)"
	for _, m := range modes {
		header += "\t" + strings.ToUpper(m)
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, r.Title+"\t"+strings.Join(r.Values, "\t"))
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintf(w, "  * %s\n", n)
	}
}

// shows says whether the report has a row for a measure: an optional or a
// repair one only when some run has it, nodesRebooted and nodesReplaced
// when one is not 0 or the runs count repairs.
func (rep *Report) shows(name string) bool {
	switch {
	case machineMeasures[name]:
		for _, r := range rep.Runs {
			if v := r.Measures[name]; v != nil && *v > 0 {
				return true
			}
		}
		return rep.shows("repairsDone")
	case !optionalMeasures[name] && !repairMeasures[name]:
		return true
	}
	for _, r := range rep.Runs {
		if _, ok := r.Measures[name]; ok {
			return true
		}
	}
	return false
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
