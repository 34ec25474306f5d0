package simulate

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// WriteKindComparison prints the same scenario's reports on several node
// kinds (simulate --nodes fake,hollow) side by side: for each run mode, a
// table of measure | one column per kind | difference (the last kind's
// median less the first's; "-" when either never happened or is no
// number). Over several trials each figure is the median with the range.
// kinds and reports go together, in the order run.
func WriteKindComparison(w io.Writer, kinds []string, reports []*Report) {
	if len(kinds) < 2 || len(kinds) != len(reports) {
		return
	}
	sums := make([]map[string]ModeSummary, len(reports))
	var modes []string
	for i, rep := range reports {
		sums[i] = map[string]ModeSummary{}
		for _, s := range Summarize(rep.Runs) {
			sums[i][s.Mode] = s
			if !containsString(modes, s.Mode) {
				modes = append(modes, s.Mode)
			}
		}
	}
	trials := reports[0].trials()
	for _, mode := range modes {
		fmt.Fprintf(w, "\nNode kinds side by side (%s run", mode)
		if trials {
			fmt.Fprintf(w, "s, median (min–max) over %d trials", reports[0].Trials)
		}
		fmt.Fprintln(w, "):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		header := "MEASURE"
		for _, k := range kinds {
			header += "\t" + strings.ToUpper(k)
		}
		fmt.Fprintln(tw, header+"\tDIFFERENCE ("+kinds[len(kinds)-1]+" − "+kinds[0]+")")
		for i := range Measures {
			m := &Measures[i]
			shown := false
			for _, rep := range reports {
				shown = shown || rep.shows(m.Name)
			}
			if !shown {
				continue
			}
			line := m.Title
			var first, last *float64
			for j := range kinds {
				s, ok := sums[j][mode]
				if !ok {
					line += "\t-"
					continue
				}
				st := s.Measures[m.Name]
				if trials {
					line += "\t" + formatStat(m, st)
				} else {
					line += "\t" + formatValue(m, st.Median)
				}
				if j == 0 {
					first = st.Median
				}
				if j == len(kinds)-1 {
					last = st.Median
				}
			}
			fmt.Fprintln(tw, line+"\t"+formatDifference(m, first, last))
		}
		tw.Flush()
	}
}

// formatDifference prints b − a: a signed duration or count, "0" when they
// agree, "-" when either is missing.
func formatDifference(m *Measure, a, b *float64) string {
	if a == nil || b == nil {
		if a == nil && b == nil {
			return "0"
		}
		return "-"
	}
	d := *b - *a
	if m.Kind == kindDuration && formatSeconds(math.Abs(d)) == formatSeconds(0) {
		return "0" // apart by less than the figures show
	}
	switch {
	case m.Kind == kindDuration && d < 0:
		return "−" + formatSeconds(-d)
	case m.Kind == kindDuration && d > 0:
		return "+" + formatSeconds(d)
	case m.Kind == kindDuration:
		return "0"
	}
	if n := int(math.Round(d)); n != 0 {
		return fmt.Sprintf("%+d", n)
	}
	return "0"
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
