package monitoring_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/monitoring"
)

// The dashboard and the alerting rules of deploy/monitoring use only metrics
// that nodeshepherd exports, read from the process `nodeshepherd run` builds
// with every controller selected.

const deployDir = "../../deploy/monitoring"

// kind is what a test needs to know of an exported metric.
type kind int

const (
	plain kind = iota
	histogram
	summary
)

// recorder passes registrations on to the manager's registry and keeps the
// collectors: a vector without children is absent from /metrics until its
// first observation, yet it is exported.
type recorder struct {
	prometheus.Registerer
	mu         *sync.Mutex
	collectors *[]prometheus.Collector
}

func (r recorder) Register(c prometheus.Collector) error {
	r.mu.Lock()
	*r.collectors = append(*r.collectors, c)
	r.mu.Unlock()
	return r.Registerer.Register(c)
}

func (r recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

var errBuilt = errors.New("every controller built")

// exported runs the manager as `nodeshepherd run` does, with every controller
// named and set as its descriptor tells its tests (descriptor.Tests.Flags),
// until the controllers are built; it scrapes /metrics then, and returns
// every metric name with its kind. No API server is needed: building a
// controller makes no request, and the run stops before the informers start.
func exported(t *testing.T) map[string]kind {
	t.Helper()
	cfg, names, err := controllers.ForTests(controllers.Names)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(names); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Select(names, names); !slices.Equal(got, controllers.Names) {
		t.Fatalf("the settings select %v, want every controller %v", got, controllers.Names)
	}

	out := map[string]kind{}
	var (
		mu         sync.Mutex
		collectors []prometheus.Collector
		addr       string
		scraped    []*dto.MetricFamily
		scrapeErr  error
	)
	constructors := map[string]manager.Constructor{}
	for name, build := range controllers.Constructors(cfg) {
		constructors[name] = func(ctx manager.Context) (manager.Controller, error) {
			ctx.Registry = recorder{Registerer: ctx.Registry, mu: &mu, collectors: &collectors}
			c, err := build(ctx)
			if err != nil || name != names[len(names)-1] {
				return c, err
			}
			scraped, scrapeErr = scrape(addr)
			return nil, errBuilt
		}
	}
	rc := &rest.Config{Host: "http://127.0.0.1:1"} // never reached
	err = manager.Run(klog.NewContext(context.Background(), klog.Background().V(10)), rc, manager.Options{
		Controllers: names, Constructors: constructors, MetricsBindAddress: "127.0.0.1:0",
		OnServing: func(a string) { addr = a },
	})
	if !errors.Is(err, errBuilt) {
		t.Fatalf("the manager stopped before every controller was built: %v", err)
	}
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	for _, mf := range scraped {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[mf.GetName()] = histogram
		case dto.MetricType_SUMMARY:
			out[mf.GetName()] = summary
		default:
			out[mf.GetName()] = plain
		}
	}
	for _, c := range collectors {
		k := plain
		switch c := c.(type) {
		case *prometheus.HistogramVec:
			k = histogram
		case *prometheus.SummaryVec:
			k = summary
		case prometheus.Metric: // a Histogram and a Summary have the same methods: ask the value
			var m dto.Metric
			if err := c.Write(&m); err != nil {
				t.Fatal(err)
			}
			if m.Histogram != nil {
				k = histogram
			} else if m.Summary != nil {
				k = summary
			}
		}
		descs := make(chan *prometheus.Desc)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no fqName in %s", d)
			}
			out[m[1]] = k
		}
	}
	return out
}

func scrape(addr string) ([]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	var out []*dto.MetricFamily
	for _, mf := range families {
		out = append(out, mf)
	}
	return out, nil
}

// known tells whether name is exported: as is, or as a histogram's
// _bucket/_sum/_count or a summary's _sum/_count series.
func known(metrics map[string]kind, name string) bool {
	if _, ok := metrics[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch metrics[base] {
		case histogram:
			return true
		case summary:
			return suffix != "_bucket"
		}
	}
	return false
}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

// dashboardQueries returns the expressions of every panel target and the
// metric selectors of the template variables' label_values(...) queries.
func dashboardQueries(t *testing.T, path string) []query {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := yaml.Unmarshal(b, &dash); err != nil { // JSON is YAML
		t.Fatalf("%s: %v", path, err)
	}
	var out []query
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where += " > " + title
			}
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					out = append(out, query{where, s})
				}
				walk(where, x)
			}
		case []any:
			for _, x := range v {
				walk(where, x)
			}
		}
	}
	walk(filepath.Base(path), dash["panels"])
	labelValues := regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	templating, _ := dash["templating"].(map[string]any)
	list, _ := templating["list"].([]any)
	for _, v := range list {
		v, _ := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		q, _ := v["query"].(string)
		if m, ok := v["query"].(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("%s: variable %v: query %q is not label_values(SELECTOR, LABEL)", path, v["name"], q)
			continue
		}
		out = append(out, query{fmt.Sprintf("%s > variable %v", filepath.Base(path), v["name"]), m[1]})
	}
	return out
}

// prometheusRule is the part of a PrometheusRule the test reads.
type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	} `yaml:"spec"`
}

func readRules(t *testing.T, path string) prometheusRule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r prometheusRule
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s, want a monitoring.coreos.com/v1 PrometheusRule", path, r.APIVersion, r.Kind)
	}
	return r
}

func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	metrics := exported(t)
	// A sanity check of the harness: names of the manager, of upstream's
	// controllers, of Draino, of the scheduler and a vector with no child yet.
	for _, n := range []string{"nodeshepherd_leader", "go_goroutines", "node_collector_evictions_total", "draino_drained_nodes_total",
		"scheduler_pending_pods", "nodeshepherd_nodelifecycle_zone_state", "nodeshepherd_outofservice_nodes", "nodeshepherd_dry_run_actions_total"} {
		if _, ok := metrics[n]; !ok {
			t.Fatalf("the harness misses %s; it found %d metrics", n, len(metrics))
		}
	}

	queries := dashboardQueries(t, filepath.Join(deployDir, "dashboard.json"))
	rules := readRules(t, filepath.Join(deployDir, "prometheusrule.yaml"))
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			queries = append(queries, query{fmt.Sprintf("prometheusrule.yaml > %s > %s%s", g.Name, r.Alert, r.Record), r.Expr})
		}
	}
	if len(queries) < 20 {
		t.Fatalf("found %d queries, want the dashboard's and the rules'", len(queries))
	}
	used := map[string]bool{}
	for _, q := range queries {
		names, err := monitoring.MetricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
			if !known(metrics, n) {
				t.Errorf("%s: %s is not exported by nodeshepherd (expression %q)", q.where, n, q.expr)
			}
		}
	}
	t.Logf("%d queries use %d of the %d exported metrics", len(queries), len(used), len(metrics))
}

// Every selector of the dashboard and of the rules names nodeshepherd's job:
// kube-scheduler and kube-controller-manager export the same upstream names
// (scheduler_pending_pods, node_collector_*), and without a job matcher a
// panel or an alert would mix in their series. The rules select
// job="nodeshepherd" (the Helm chart's ServiceMonitor and the documented
// scrape job); the dashboard its $job variable, which defaults to it.
func TestDashboardAndAlertsSelectNodeShepherdsJob(t *testing.T) {
	check := func(where, expr, want string) {
		t.Helper()
		sels, err := monitoring.Selectors(expr)
		if err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
			return
		}
		for _, s := range sels {
			if !s.Has("job") {
				t.Errorf("%s: %s has no job matcher (want %s): %q", where, s.Name, want, expr)
			}
		}
		if !strings.Contains(expr, want) {
			t.Errorf("%s: %q does not select %s", where, expr, want)
		}
	}
	for _, q := range dashboardQueries(t, filepath.Join(deployDir, "dashboard.json")) {
		check(q.where, q.expr, `job=~"$job"`)
	}
	rules := readRules(t, filepath.Join(deployDir, "prometheusrule.yaml"))
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			check(fmt.Sprintf("prometheusrule.yaml > %s > %s%s", g.Name, r.Alert, r.Record), r.Expr, `job="nodeshepherd"`)
		}
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"name": "job"`) || !strings.Contains(string(b), `"query": "nodeshepherd"`) {
		t.Errorf("dashboard.json: no job variable defaulting to nodeshepherd")
	}
}

// Every alert says what happened and points to what to do: summary,
// description, a severity, and a runbook_url whose anchor is a heading of
// docs/monitoring.md.
func TestAlertsHaveRunbooks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			anchors[anchor(strings.TrimLeft(h, "# "))] = true
		}
	}
	rules := readRules(t, filepath.Join(deployDir, "prometheusrule.yaml"))
	var alerts []string
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
			}
			doc, frag, _ := strings.Cut(r.Annotations["runbook_url"], "#")
			if !strings.HasSuffix(doc, "docs/monitoring.md") || !anchors[frag] {
				t.Errorf("alert %s: runbook_url %q does not point to a heading of docs/monitoring.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	// The alerts the operators asked for (issue #22).
	for _, want := range []string{"NodeShepherdNoLeader", "NodeShepherdZoneFullDisruption", "NodeShepherdDrainBlocked",
		"NodeShepherdPodEvictionRateHigh", "NodeShepherdReadinessRestoresFailing"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// anchor is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as dashes.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// deploy/monitoring/kustomization.yaml applies every file of the directory:
// the rules as a resource, the dashboard through the ConfigMap generator.
func TestKustomizationCoversTheDirectory(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources          []string `yaml:"resources"`
		ConfigMapGenerator []struct {
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		listed[r] = true
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			_, file, _ := strings.Cut(f, "=") // key=file
			if file == "" {
				file = f
			}
			listed[file] = true
		}
	}
	entries, err := os.ReadDir(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	var present []string
	for _, e := range entries {
		present = append(present, e.Name())
		if !listed[e.Name()] {
			t.Errorf("deploy/monitoring/%s is not in kustomization.yaml", e.Name())
		}
	}
	for f := range listed {
		if !slices.Contains(present, f) {
			t.Errorf("kustomization.yaml lists %s, which deploy/monitoring lacks", f)
		}
	}
}
