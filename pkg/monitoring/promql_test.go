package monitoring

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`nodeshepherd_leader == 1`, []string{"nodeshepherd_leader"}},
		{`sum(rate(node_collector_evictions_total{zone=~"$zone"}[$__rate_interval])) by (zone)`, []string{"node_collector_evictions_total"}},
		{`sum by (zone, state) (nodeshepherd_nodelifecycle_zone_state{state!="Normal"})`, []string{"nodeshepherd_nodelifecycle_zone_state"}},
		{`histogram_quantile(0.99, sum by (le) (rate(scheduler_pod_scheduling_sli_duration_seconds_bucket[5m])))`,
			[]string{"scheduler_pod_scheduling_sli_duration_seconds_bucket"}},
		{`max(a) without (instance) / on (zone) group_left (b) c * ignoring(x) group_right d`, []string{"a", "c", "d"}},
		{`a and b or c unless bool d`, []string{"a", "b", "c", "d"}},
		{`(max(nodeshepherd_leader) or vector(0)) == 0`, []string{"nodeshepherd_leader"}},
		{`absent(nodeshepherd_leader{job="x"}) offset 5m`, []string{"nodeshepherd_leader"}},
		{`rate(x[5m] offset -1h30m) @ start()`, []string{"x"}},
		{`min_over_time(x[1h:1m]) > 1e-3 + 0x1f - .5 + Inf - NaN`, []string{"x"}},
		{`{__name__="x", a="b"} + {"y.z", c!~"d"}`, []string{"x", "y.z"}},
		{`label_replace(x, "dst", "$1", "src", "(.*)") # a comment with y and (
		 + z`, []string{"x", "z"}},
		{`topk(5, x) + count_values("v", y) + quantile(0.9, z) + x`, []string{"x", "y", "z"}},
		{`SUM BY (a) (x)`, []string{"x"}},
		{`rate(x[${__range}]) * ${factor} + $__interval_ms`, []string{"x"}},
		{"x{a=`raw \\\" string`}", []string{"x"}},
		{`recording:rule:sum`, []string{"recording:rule:sum"}},
	} {
		got, err := MetricNames(tc.expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestMetricNamesErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`x{a="b}`, "offset 4: unterminated string"},
		{`x{a="b"`, "offset 1: unterminated {"},
		{`rate(x[5m)`, `unexpected ')' in range`},
		{`sum(x`, "1 unclosed ("},
		{`x)`, "offset 1: unmatched )"},
		{`{__name__=~"node_.*"}`, `only __name__="..." names one metric`},
		{`x{a}`, `label "a" without a matcher`},
		{`x{a=b}`, `label "a": a string must follow =`},
		{`sum by zone (x)`, "by must be followed by a (label list)"},
		{`x ; y`, `offset 2: unexpected ';'`},
		{`x + $`, "a lone $"},
		{`x * ${y`, "unterminated ${...} variable"},
	} {
		_, err := MetricNames(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MetricNames(%q): error %v, want one containing %q", tc.expr, err, tc.want)
		}
	}
}

// FuzzMetricNames: any input gives names or an error, never a panic; names
// are non-empty and unique; and an expression wrapped in an aggregation
// selects the same metrics.
func FuzzMetricNames(f *testing.F) {
	for _, s := range []string{`up`, `sum by (zone) (rate(x{a=~"$z"}[$__rate_interval]))`, `{__name__="x"}`,
		`a / on (b) group_left c`, `x # comment`, "x{a=`b`}", `1e-3 * y offset 5m`, `"unterminated`, `${v}`, `{"q.m"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := MetricNames(expr)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range names {
			if n == "" || seen[n] {
				t.Fatalf("MetricNames(%q) = %q: empty or repeated name", expr, names)
			}
			seen[n] = true
		}
		wrapped, err := MetricNames("sum by (instance) (" + expr + "\n)")
		if err != nil {
			t.Fatalf("MetricNames(%q) = %q, but wrapped in sum by (...): %v", expr, names, err)
		}
		if !slices.Equal(names, wrapped) {
			t.Fatalf("MetricNames(%q) = %q, wrapped in sum by (...): %q", expr, names, wrapped)
		}
	})
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []Selector
	}{
		{`sum(a)`, []Selector{{Name: "a"}}},
		{`sum(rate(a{job="x", zone=~"$zone"}[5m])) / b{job=~"$job"}`,
			[]Selector{{Name: "a", Labels: []string{"job", "zone"}}, {Name: "b", Labels: []string{"job"}}}},
		{`{__name__="a", job="x"} or vector(0)`, []Selector{{Name: "a", Labels: []string{"job"}}}},
		{`max by (zone) (a{state="x"}) == 1 and a`, []Selector{{Name: "a", Labels: []string{"state"}}, {Name: "a"}}},
	} {
		got, err := Selectors(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: selectors %+v, want %+v", tc.expr, got, tc.want)
		}
	}
}
