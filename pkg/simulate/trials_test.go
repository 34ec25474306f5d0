package simulate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func vals(fs ...any) []*float64 {
	var out []*float64
	for _, f := range fs {
		switch v := f.(type) {
		case nil:
			out = append(out, nil)
		case int:
			x := float64(v)
			out = append(out, &x)
		case float64:
			out = append(out, &v)
		}
	}
	return out
}

func str(v *float64) string {
	if v == nil {
		return "never"
	}
	b, _ := json.Marshal(*v)
	return string(b)
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		name             string
		in               []*float64
		median, min, max string
	}{
		{"one trial", vals(7), "7", "7", "7"},
		{"odd count, unsorted", vals(9, 3, 5), "5", "3", "9"},
		{"even count: mean of the middle two", vals(4, 1, 10, 2), "3", "1", "10"},
		{"never sorts last", vals(nil, 2, 4), "4", "2", "never"},
		{"never in the middle of an even count", vals(nil, 2, 4, nil), "never", "2", "never"},
		{"never everywhere", vals(nil, nil), "never", "never", "never"},
		{"fractions", vals(0.5, 1.5), "1", "0.5", "1.5"},
	} {
		st := Aggregate(tc.in)
		if str(st.Median) != tc.median || str(st.Min) != tc.min || str(st.Max) != tc.max {
			t.Errorf("%s: median %s min %s max %s, want %s %s %s", tc.name, str(st.Median), str(st.Min), str(st.Max), tc.median, tc.min, tc.max)
		}
		if len(st.Values) != len(tc.in) {
			t.Errorf("%s: %d values kept, want %d", tc.name, len(st.Values), len(tc.in))
		}
		for i := range tc.in {
			if st.Values[i] != tc.in[i] {
				t.Errorf("%s: values reordered", tc.name)
			}
		}
	}
	if st := Aggregate(nil); st.Median != nil || st.Min != nil {
		t.Error("no trials must give no figures")
	}
}

func TestFormatStat(t *testing.T) {
	d, c := measure("timeToDetect"), measure("podsEvicted")
	for _, tc := range []struct {
		m    *Measure
		in   []*float64
		want string
	}{
		{d, vals(34, 33, 36), "34s (33s–36s)"},
		{d, vals(34, 34), "34s"},
		{d, vals(34, nil, 30), "34s (30s–never)"},
		{c, vals(0, 0, 2), "0 (0–2)"},
		{d, vals(12), "12s"},
	} {
		if got := formatStat(tc.m, Aggregate(tc.in)); got != tc.want {
			t.Errorf("formatStat(%s, %v) = %q, want %q", tc.m.Name, tc.in, got, tc.want)
		}
	}
}

// trialsReport is two trials of each mode; upstream's second trial fails
// its expectation.
func trialsReport() *Report {
	rep := testReport()
	rep.Trials = 2
	var runs []*RunResult
	for trial := 1; trial <= 2; trial++ {
		for _, r := range rep.Runs {
			c := *r
			c.Trial = trial
			c.Measures = map[string]*float64{}
			for k, v := range r.Measures {
				x := *v + float64(trial-1)*2
				c.Measures[k] = &x
			}
			c.Expectations = nil
			for _, e := range r.Expectations {
				v := c.Measures[e.Metric]
				e.Value, e.Passed = v, *v <= 30
				if r.Mode == ModeUpstream {
					e.Passed = trial == 1
				}
				c.Expectations = append(c.Expectations, e)
			}
			runs = append(runs, &c)
		}
	}
	rep.Runs = runs
	return rep
}

func TestSummaryOverTrials(t *testing.T) {
	rep := trialsReport()
	var b bytes.Buffer
	rep.WriteSummary(&b)
	out := b.String()
	for _, want := range []string{
		"NODESHEPHERD median (min–max)", "UPSTREAM median (min–max)",
		"time to detect", "40s (39s–41s)", "longest NotReady after recovery",
		"15s (14s–16s)",
		"each must hold in every trial",
		"PASS   2/2   podNotReadyAfterRecovery ≤ 30s", "FAIL   1/2   podNotReadyAfterRecovery ≤ 30s",
		"Trials where every expectation held: nodeshepherd 2/2, upstream 1/2.",
		"1 of 2 expectations FAILED in at least one trial.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	sums := Summarize(rep.Runs)
	if len(sums) != 2 || sums[0].Mode != ModeNodeShepherd || sums[0].Trials != 2 || sums[0].TrialsPassed != 2 || sums[1].TrialsPassed != 1 {
		t.Errorf("summaries: %+v", sums)
	}

	dir := t.TempDir()
	if err := rep.WriteJSON(filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	st := back.Summary[1].Measures["podNotReadyAfterRecovery"]
	if back.Trials != 2 || len(back.Runs) != 4 || len(st.Values) != 2 || *st.Values[0] != 164 || *st.Values[1] != 166 || *st.Median != 165 {
		t.Errorf("report.json: trials %d, runs %d, upstream podNotReadyAfterRecovery %+v", back.Trials, len(back.Runs), st)
	}
	if e := back.Summary[1].Expectations[0]; e.Passed != 1 || e.Trials != 2 {
		t.Errorf("report.json: upstream expectation %+v", e)
	}

	p := filepath.Join(dir, "report.html")
	if err := rep.WriteHTML(p); err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(p)
	page := string(html)
	for _, want := range []string{"2 trials per run", "Every trial", "nodeshepherd #2", "upstream #1", "trials passed", "1/2", "40s (39s–41s)", "chart"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The charts draw one trial of each mode, not every trial.
	if n := strings.Count(page, `<svg class="chart"`); n != 5 {
		t.Errorf("%d charts, want 5", n)
	}
	// NotReady pods and NotReady nodes of the one zone: two lines of upstream's.
	if n := strings.Count(page, "NotReady (upstream)</title>"); n != 2 {
		t.Errorf("upstream NotReady drawn %d times, want twice", n)
	}
}

func TestSingleTrialSummaryHasNoRanges(t *testing.T) {
	var b bytes.Buffer
	testReport().WriteSummary(&b)
	if out := b.String(); strings.Contains(out, "median") || strings.Contains(out, "trial") {
		t.Errorf("a single trial's summary talks about trials:\n%s", out)
	}
}

func slice(name, svc string, ready ...bool) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for i, r := range ready {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{name + "-" + string(rune('a'+i))},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r)}})
	}
	return es
}

func TestServiceEndpointsMeasures(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecorder(func() time.Time { return now })
	r.watchServices([]string{"default/web"})
	r.onEndpointSlice(slice("web-1", "web", true, true, true), false)
	r.onEndpointSlice(slice("web-2", "web", true), false)
	r.onEndpointSlice(slice("other-1", "other", true, true), false) // not the scenario's
	r.start()
	if s := r.sample(0); s.ServiceEndpoints != 4 {
		t.Fatalf("sample: %d ready endpoints, want 4", s.ServiceEndpoints)
	}
	now = now.Add(time.Second)
	r.onEndpointSlice(slice("web-1", "web", false, true, false), false)
	r.onEndpointSlice(slice("web-2", "web"), true)
	r.onEndpointSlice(slice("web-1", "web", true, true, true), false)
	// The same address in two slices, as while a pod moves between them, counts once.
	dup := slice("web-3", "web", true)
	dup.Endpoints[0].Addresses = []string{"web-1-a"}
	r.onEndpointSlice(dup, false)
	// Pods of hollow nodes share one IP (kubemark's fake runtime): each
	// endpoint names its pod, and two pods are two endpoints.
	shared := slice("web-4", "web", true, true)
	for i := range shared.Endpoints {
		shared.Endpoints[i].Addresses = []string{"192.168.192.168"}
		shared.Endpoints[i].TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-pod-" + string(rune('a'+i))}
	}
	r.onEndpointSlice(shared, false)
	if s := r.sample(1); s.ServiceEndpoints != 5 {
		t.Errorf("sample with two pods of one IP: %d ready endpoints, want 5", s.ServiceEndpoints)
	}
	r.onEndpointSlice(shared, true)
	m := r.finish(now)
	if got := str(m["serviceReadyEndpointsMin"]); got != "1" {
		t.Errorf("serviceReadyEndpointsMin = %s, want 1", got)
	}
	if got := str(m["serviceReadyEndpointsAtEnd"]); got != "3" {
		t.Errorf("serviceReadyEndpointsAtEnd = %s, want 3", got)
	}

	none := newRecorder(func() time.Time { return now })
	none.start()
	if m := none.finish(now); m["serviceReadyEndpointsMin"] != nil || m["serviceReadyEndpointsAtEnd"] != nil || m["maxServiceWithoutReadyEndpoints"] != nil {
		t.Error("a scenario without Services must have no endpoint figures")
	}
}

// maxServiceWithoutReadyEndpoints is the longest outage of one Service
// during the timeline: from its last ready endpoint to the next, the part
// before the timeline left out, an outage still open counted to the end,
// and a Service that never had a ready endpoint not out at all.
func TestServiceOutageMeasure(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecorder(func() time.Time { return now })
	r.watchServices([]string{"default/web", "default/api", "default/idle"})
	r.onEndpointSlice(slice("web-1", "web", true), false)
	r.onEndpointSlice(slice("api-1", "api", true, true), false)
	r.onEndpointSlice(slice("idle-1", "idle", false), false) // never ready: starting, not out
	now = now.Add(time.Second)
	r.onEndpointSlice(slice("web-1", "web", false), false) // out 4 s before the timeline...
	now = now.Add(4 * time.Second)
	r.start()
	now = now.Add(3 * time.Second)
	r.onEndpointSlice(slice("web-1", "web", true), false) // ...and 3 s of it counted
	if m := r.finish(now); str(m["maxServiceWithoutReadyEndpoints"]) != "3" {
		t.Fatalf("after web's outage across the start: %s s, want 3", str(m["maxServiceWithoutReadyEndpoints"]))
	}
	// One of two ready endpoints going is no outage; the pod moving out
	// while its replacement is ready (move-before-evict) is none either.
	r.onEndpointSlice(slice("api-1", "api", true, false), false)
	r.onEndpointSlice(slice("api-2", "api", true), false)
	r.onEndpointSlice(slice("api-1", "api"), true)
	now = now.Add(time.Second)
	r.onEndpointSlice(slice("web-1", "web", false), false)
	now = now.Add(10 * time.Second)
	r.onEndpointSlice(slice("web-1", "web", true), false)
	r.onEndpointSlice(slice("api-2", "api", false), false) // out to the end: 20 s
	now = now.Add(20 * time.Second)
	if m := r.finish(now); str(m["maxServiceWithoutReadyEndpoints"]) != "20" {
		t.Fatalf("with api out to the end: %s s, want 20", str(m["maxServiceWithoutReadyEndpoints"]))
	}

	quiet := newRecorder(func() time.Time { return now })
	quiet.watchServices([]string{"default/web"})
	quiet.onEndpointSlice(slice("web-1", "web", true), false)
	quiet.start()
	now = now.Add(time.Minute)
	if m := quiet.finish(now); str(m["maxServiceWithoutReadyEndpoints"]) != "0" {
		t.Errorf("a Service never out: %s s, want 0", str(m["maxServiceWithoutReadyEndpoints"]))
	}

	// A run stopped during the setup (Ctrl-C) had no timeline: no outage.
	early := newRecorder(func() time.Time { return now })
	early.watchServices([]string{"default/web"})
	early.onEndpointSlice(slice("web-1", "web", true), false)
	early.onEndpointSlice(slice("web-1", "web", false), false)
	now = now.Add(time.Minute)
	if m := early.finish(now); str(m["maxServiceWithoutReadyEndpoints"]) != "0" {
		t.Errorf("an outage during the setup: %s s, want 0", str(m["maxServiceWithoutReadyEndpoints"]))
	}
}
