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
	Scenario    string       `json:"scenario"`
	Description string       `json:"description,omitempty"`
	File        string       `json:"file"`
	TimeScale   float64      `json:"timeScale"`
	Duration    Duration     `json:"duration"`
	Started     time.Time    `json:"started"`
	Timeline    []string     `json:"timeline"`
	Runs        []*RunResult `json:"runs"`
}

// NewReport starts a report of a scenario.
func NewReport(sc *Scenario, scale float64) *Report {
	rep := &Report{Scenario: sc.Name, Description: strings.TrimSpace(sc.Description), File: sc.path, TimeScale: scale,
		Duration: sc.Duration, Started: time.Now().UTC().Truncate(time.Second)}
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

// WriteJSON writes the report for machines.
func (rep *Report) WriteJSON(path string) error {
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
// every expectation with its outcome.
func (rep *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\nScenario %s (%s): %v of cluster time", rep.Scenario, rep.File, rep.Duration.Duration)
	if rep.TimeScale != 1 {
		fmt.Fprintf(w, ", run at time scale %g (every duration divided by %g; figures below are cluster time)", rep.TimeScale, rep.TimeScale)
	}
	fmt.Fprintln(w)
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "  %-12s %s", r.Mode+":", r.Components)
		if r.Interrupted {
			fmt.Fprint(w, " — INTERRUPTED, figures cover the part that ran")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "MEASURE"
	for _, r := range rep.Runs {
		header += "\t" + strings.ToUpper(r.Mode)
	}
	fmt.Fprintln(tw, header)
	for i := range Measures {
		m := &Measures[i]
		line := m.Title
		for _, r := range rep.Runs {
			line += "\t" + formatValue(m, r.Measures[m.Name])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	total, failed := 0, 0
	for _, r := range rep.Runs {
		if len(r.Expectations) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nExpectations (%s):\n", r.Mode)
		for _, c := range r.Expectations {
			total++
			mark := "PASS"
			if !c.Passed {
				mark, failed = "FAIL", failed+1
			}
			fmt.Fprintf(w, "  %s  %-50s got %s\n", mark, c.Expectation, formatValue(measure(c.Metric), c.Value))
		}
	}
	switch {
	case total == 0:
		fmt.Fprintln(w, "\nNo expectations in the scenario.")
	case failed == 0:
		fmt.Fprintf(w, "\nAll %d expectations hold.\n", total)
	default:
		fmt.Fprintf(w, "\n%d of %d expectations FAILED.\n", failed, total)
	}
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
