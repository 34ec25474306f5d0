package simulate

import (
	"fmt"
	"slices"
)

// Stat is one measure over the trials of a run mode. A nil value is
// "never" (a duration that did not happen) and sorts above every number,
// so that a trial where something never happened is never hidden by a
// median of the others.
type Stat struct {
	Median *float64   `json:"median"`
	Min    *float64   `json:"min"`
	Max    *float64   `json:"max"`
	Values []*float64 `json:"values"` // per trial, in trial order
}

// Aggregate summarizes one measure's values over trials: median (the mean
// of the two middle values for an even count, never if either is never),
// minimum and maximum.
func Aggregate(values []*float64) Stat {
	st := Stat{Values: values}
	if len(values) == 0 {
		return st
	}
	sorted := slices.Clone(values)
	slices.SortStableFunc(sorted, func(a, b *float64) int {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		case b == nil:
			return -1
		}
		if *a < *b {
			return -1
		} else if *a > *b {
			return 1
		}
		return 0
	})
	st.Min, st.Max = sorted[0], sorted[len(sorted)-1]
	n := len(sorted)
	if n%2 == 1 {
		st.Median = sorted[n/2]
	} else if a, b := sorted[n/2-1], sorted[n/2]; a != nil && b != nil {
		m := (*a + *b) / 2
		st.Median = &m
	}
	return st
}

// ModeSummary is a run mode over its trials.
type ModeSummary struct {
	Mode   string `json:"mode"`
	Trials int    `json:"trials"`
	// TrialsPassed counts the trials where every expectation held.
	TrialsPassed int                    `json:"trialsPassed"`
	Measures     map[string]Stat        `json:"measures"`
	Expectations []ExpectationOverTrial `json:"expectations"`
}

// ExpectationOverTrial is one expectation over a mode's trials: it holds
// only if it held in every trial.
type ExpectationOverTrial struct {
	Expectation string `json:"expectation"`
	Metric      string `json:"metric"`
	Passed      int    `json:"passed"` // trials where it held
	Trials      int    `json:"trials"`
	Got         Stat   `json:"got"`
}

// Held says whether the expectation held in every trial.
func (e *ExpectationOverTrial) Held() bool { return e.Passed == e.Trials }

// Summarize groups the runs by mode (in the order they first ran) and
// aggregates every measure and expectation over the trials.
func Summarize(runs []*RunResult) []ModeSummary {
	var out []ModeSummary
	index := map[string]int{}
	byMode := map[string][]*RunResult{}
	for _, r := range runs {
		if _, ok := index[r.Mode]; !ok {
			index[r.Mode] = len(out)
			out = append(out, ModeSummary{Mode: r.Mode})
		}
		byMode[r.Mode] = append(byMode[r.Mode], r)
	}
	for i := range out {
		s := &out[i]
		rs := byMode[s.Mode]
		s.Trials = len(rs)
		s.Measures = map[string]Stat{}
		for _, m := range Measures {
			var vals []*float64
			for _, r := range rs {
				vals = append(vals, r.Measures[m.Name])
			}
			s.Measures[m.Name] = Aggregate(vals)
		}
		expIndex := map[string]int{}
		var got [][]*float64
		for _, r := range rs {
			if r.Failed() == 0 {
				s.TrialsPassed++
			}
			for _, c := range r.Expectations {
				j, ok := expIndex[c.Expectation]
				if !ok {
					j = len(s.Expectations)
					expIndex[c.Expectation] = j
					s.Expectations = append(s.Expectations, ExpectationOverTrial{Expectation: c.Expectation, Metric: c.Metric})
					got = append(got, nil)
				}
				e := &s.Expectations[j]
				e.Trials++
				if c.Passed {
					e.Passed++
				}
				got[j] = append(got[j], c.Value)
			}
		}
		for j := range s.Expectations {
			s.Expectations[j].Got = Aggregate(got[j])
		}
	}
	return out
}

// formatStat prints a measure over trials: "34s (33s–36s)", or one value
// when every trial agreed.
func formatStat(m *Measure, st Stat) string {
	med := formatValue(m, st.Median)
	lo, hi := formatValue(m, st.Min), formatValue(m, st.Max)
	if len(st.Values) < 2 || lo == hi {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, lo, hi)
}
