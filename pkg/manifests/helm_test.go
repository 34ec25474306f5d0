package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	runcmd "github.com/nodeshepherd/nodeshepherd/pkg/cmd/run"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

// helmCases are the chart's values that stand for deploy/ and each overlay:
// the chart rendered with them must give the same objects as kustomize.
var helmCases = []struct {
	name   string // deploy/ or deploy/overlays/NAME
	values string // values.yaml for the chart
}{
	{"deploy", ``},
	{"deploy/overlays/companion", `companion: {enabled: true}`},
	{"deploy/overlays/lifecycle", `
controllers: [nodelifecycle, tainteviction]
serviceAccount: {name: nodeshepherd-lifecycle}
config: {drain: null, scheduler: null}`},
	{"deploy/overlays/drain", `
controllers: [drain]
serviceAccount: {name: nodeshepherd-drain}
config:
  drain: {drainCondition: ["KernelDeadlock=True,10m", "Ready=Unknown,30m"]}
  scheduler: null`},
	{"deploy/overlays/scheduler", `
controllers: [scheduler]
serviceAccount: {name: nodeshepherd-scheduler}
config: {drain: null}`},
}

// TestHelmChartSameAsKustomize lints charts/nodeshepherd and checks that it
// renders, for deploy/ and each overlay, the same objects as kustomize: the
// same kinds, names and namespaces, the same RBAC rules, bindings and
// subjects, the same Deployment, Service, PodDisruptionBudget and API
// Priority and Fairness objects (labels and the pod template's metadata
// aside), and a configuration that runs the same controllers with the same
// settings (defaults the chart writes out aside).
func TestHelmChartSameAsKustomize(t *testing.T) {
	root := repoRoot(t)
	chart := filepath.Join(root, "charts", "nodeshepherd")
	if out, err := exec.Command(helmCLI(t), "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint %s: %v\n%s", chart, err, out)
	}
	for _, tc := range helmCases {
		t.Run(strings.ReplaceAll(tc.name, "/", "_"), func(t *testing.T) {
			out, err := exec.Command("kubectl", "kustomize", filepath.Join(root, tc.name)).CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", tc.name, err, out)
			}
			want := decodeObjects(t, out)
			got := helmTemplate(t, chart, tc.values)
			compareRendered(t, tc.name, want, got, true)
		})
	}
	// Every controller of the registry: the chart knows each one and renders
	// the RBAC of its deploy/components/NAME (deploy/ has no configuration
	// running them all, so the configuration is left out).
	t.Run("every_controller", func(t *testing.T) {
		dir := deployKustomization(t, controllers.Names)
		out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize base and every component: %v\n%s", err, out)
		}
		list, _ := yaml.Marshal(map[string]any{"controllers": controllers.Names})
		got := helmTemplate(t, chart, string(list))
		// Helm installs the chart's crds/ apart from its templates; make
		// generate writes them from the same source as the components'
		// (TestGeneratedFilesAreCurrent).
		want := slices.DeleteFunc(decodeObjects(t, out), func(o map[string]any) bool { return o["kind"] == "CustomResourceDefinition" })
		compareRendered(t, "deploy/base with every component", want, got, false)
	})
}

// TestHelmChartRejectsBadValues: an unknown controller, one that
// kube-controller-manager also runs in companion mode, or a value that
// values.schema.json refuses (misspelt or mistyped) fails the render with a
// message that names it.
func TestHelmChartRejectsBadValues(t *testing.T) {
	chart := filepath.Join(repoRoot(t), "charts", "nodeshepherd")
	for values, wantMsg := range map[string]string{
		`controllers: [drain, nodelifecyle]`:                              `unknown controller "nodelifecyle"`,
		`companion: {enabled: true, controllers: [drain, nodelifecycle]}`: `companion.controllers: "nodelifecycle"`,
		`controllers: []`: `controllers is empty`,
		// values.schema.json: a misspelt or mistyped value fails, naming it.
		`replica: 3`:                     `additional properties 'replica' not allowed`,
		`replicas: two`:                  `at '/replicas': got string, want integer`,
		`metrics: {securePort: 0}`:       `at '/metrics/securePort'`,
		`image: {pullPolicy: Sometimes}`: `at '/image/pullPolicy'`,
	} {
		out, err := HelmTemplate(helmCLI(t), chart, values)
		if err == nil {
			t.Errorf("values %q: helm template succeeded, want an error", values)
			continue
		}
		if !strings.Contains(string(out), wantMsg) {
			t.Errorf("values %q: error does not say %q:\n%s", values, wantMsg, out)
		}
	}
}

// TestHelmChartServiceMonitor: the ServiceMonitor scrapes as job
// "nodeshepherd" (the job the dashboard and alerts select), and Prometheus
// sends its token only to a server it verifies: the CA comes from the
// serving certificate's Secret or is named; skipping verification is only
// what is asked for, and without either the render fails saying what to set.
func TestHelmChartServiceMonitor(t *testing.T) {
	chart := filepath.Join(repoRoot(t), "charts", "nodeshepherd")
	if objs := helmTemplate(t, chart, ``); hasKind(objs, "ServiceMonitor") {
		t.Errorf("a ServiceMonitor by default")
	}
	endpoint := func(t *testing.T, values string) (map[string]any, []map[string]any) {
		t.Helper()
		objs := helmTemplate(t, chart, values)
		for _, o := range objs {
			if o["kind"] != "ServiceMonitor" {
				continue
			}
			if got := dig(o, "spec", "jobLabel"); got != "app.kubernetes.io/name" {
				t.Errorf("jobLabel %v, want app.kubernetes.io/name (job=\"nodeshepherd\", which the dashboard and alerts select)", got)
			}
			ep := dig(o, "spec", "endpoints").([]any)[0].(map[string]any)
			if ep["port"] != "https" || ep["scheme"] != "https" || ep["path"] != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %v, want port https, scheme https, path /metrics", ep)
			}
			return ep, objs
		}
		t.Fatalf("no ServiceMonitor with values %s", values)
		return nil, nil
	}
	// The Service's label becomes the job: it must be "nodeshepherd".
	for _, o := range helmTemplate(t, chart, ``) {
		if o["kind"] == "Service" && dig(o, "metadata", "labels", "app.kubernetes.io/name") != "nodeshepherd" {
			t.Errorf("Service %v lacks app.kubernetes.io/name: nodeshepherd (the ServiceMonitor's job)", dig(o, "metadata", "name"))
		}
	}

	t.Run("no CA refused", func(t *testing.T) {
		out, err := HelmTemplate(helmCLI(t), chart, `metrics: {serviceMonitor: {enabled: true}}`)
		if err == nil || !strings.Contains(string(out), "metrics.tls.secretName") || !strings.Contains(string(out), "insecureSkipVerify") {
			t.Errorf("render without a CA: err %v, output %s; want a failure naming metrics.tls.secretName and insecureSkipVerify", err, out)
		}
	})
	t.Run("serving Secret mounted and its CA verified", func(t *testing.T) {
		ep, objs := endpoint(t, `metrics: {tls: {secretName: metrics-tls}, serviceMonitor: {enabled: true}}`)
		tls := ep["tlsConfig"].(map[string]any)
		if tls["insecureSkipVerify"] == true || dig(tls, "ca", "secret", "name") != "metrics-tls" || dig(tls, "ca", "secret", "key") != "ca.crt" ||
			tls["serverName"] != "nodeshepherd-metrics."+DeployNamespace+".svc" {
			t.Errorf("tlsConfig %v, want ca.crt of Secret metrics-tls, serverName nodeshepherd-metrics.%s.svc, verified", tls, DeployNamespace)
		}
		var mounted, configured bool
		for _, o := range objs {
			switch o["kind"] {
			case "Deployment":
				for _, v := range dig(o, "spec", "template", "spec", "volumes").([]any) {
					mounted = mounted || dig(v, "secret", "secretName") == "metrics-tls"
				}
			case "ConfigMap":
				cfg, _ := dig(o, "data", "config.yaml").(string)
				configured = strings.Contains(cfg, "tlsCertFile: /etc/nodeshepherd-tls/tls.crt") && strings.Contains(cfg, "tlsPrivateKeyFile: /etc/nodeshepherd-tls/tls.key")
			}
		}
		if !mounted || !configured {
			t.Errorf("Secret metrics-tls mounted %v, given to tlsCertFile/tlsPrivateKeyFile %v; want both", mounted, configured)
		}
	})
	t.Run("named CA", func(t *testing.T) {
		ep, _ := endpoint(t, `metrics: {serviceMonitor: {enabled: true, tlsConfig: {ca: {configMap: {name: ca, key: root.pem}}, serverName: metrics.example}}}`)
		tls := ep["tlsConfig"].(map[string]any)
		if dig(tls, "ca", "configMap", "name") != "ca" || tls["serverName"] != "metrics.example" || tls["insecureSkipVerify"] == true {
			t.Errorf("tlsConfig %v, want the named CA and server name, verified", tls)
		}
	})
	t.Run("skip when asked", func(t *testing.T) {
		ep, _ := endpoint(t, `metrics: {serviceMonitor: {enabled: true, tlsConfig: {insecureSkipVerify: true}}}`)
		if dig(ep, "tlsConfig", "insecureSkipVerify") != true {
			t.Errorf("tlsConfig %v, want insecureSkipVerify as asked", ep["tlsConfig"])
		}
	})
}

// helmTemplate renders the chart with values, failing the test if helm fails.
func helmTemplate(t *testing.T, chart, values string) []map[string]any {
	t.Helper()
	out, err := HelmTemplate(helmCLI(t), chart, values)
	if err != nil {
		t.Fatalf("helm template with values %q: %v\n%s", values, err, out)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding rendered objects: %v", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func hasKind(objs []map[string]any, kind string) bool {
	return slices.ContainsFunc(objs, func(o map[string]any) bool { return o["kind"] == kind })
}

func dig(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

// configMapHash is kustomize's name suffix of a generated ConfigMap; the
// chart names it plainly and rolls the pods by an annotation instead.
var configMapHash = regexp.MustCompile(`^(nodeshepherd-config)-[a-z0-9]{10}$`)

// normalize drops what may differ between kustomize's and the chart's
// rendering: labels, the pod template's metadata, the ConfigMap's hash
// suffix, and the configuration file (compared on its own).
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = normalize(e)
		}
		if md, ok := out["metadata"].(map[string]any); ok {
			delete(md, "labels")
			if len(md) == 0 {
				delete(out, "metadata")
			}
		}
		if tmpl, ok := out["template"].(map[string]any); ok {
			delete(tmpl, "metadata")
		}
		if _, ok := out["data"].(map[string]any); ok && out["kind"] == "ConfigMap" {
			delete(out, "data")
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	case string:
		return configMapHash.ReplaceAllString(v, "$1")
	}
	return v
}

func objectKey(o map[string]any) string {
	ns, _ := dig(o, "metadata", "namespace").(string)
	name, _ := dig(o, "metadata", "name").(string)
	return fmt.Sprintf("%v %s/%s", o["kind"], ns, configMapHash.ReplaceAllString(name, "$1"))
}

func compareRendered(t *testing.T, name string, want, got []map[string]any, withConfig bool) {
	t.Helper()
	index := func(objs []map[string]any) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			m[objectKey(o)] = o
		}
		return m
	}
	w, g := index(want), index(got)
	var keys []string
	for k := range w {
		keys = append(keys, k)
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		wo, g1 := w[k], g[k]
		switch {
		case g1 == nil:
			t.Errorf("%s renders %s, the chart does not", name, k)
			continue
		case wo == nil:
			t.Errorf("the chart renders %s, %s does not", k, name)
			continue
		}
		if wo["kind"] == "ConfigMap" && withConfig {
			compareConfig(t, name, dig(wo, "data", "config.yaml"), dig(g1, "data", "config.yaml"))
		}
		if nw, ng := normalize(wo), normalize(g1); !reflect.DeepEqual(nw, ng) {
			wy, _ := yaml.Marshal(nw)
			gy, _ := yaml.Marshal(ng)
			t.Errorf("%s differs (labels aside):\n%s:\n%s\nchart:\n%s", k, name, wy, gy)
		}
	}
}

// compareConfig checks that both configuration files are valid, run the same
// controllers (as `nodeshepherd run --config` selects them) and set the same
// settings; the chart writes out two defaults deploy/'s files may leave out
// (leaderElection.leaderElect: true, manager.securePort: 10261) and names the
// controllers where deploy/ may say "*".
func compareConfig(t *testing.T, name string, want, got any) {
	t.Helper()
	ws, _ := want.(string)
	gs, _ := got.(string)
	var runs [2][]string
	var maps [2]map[string]any
	for i, text := range []string{ws, gs} {
		f := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := runcmd.SelectedControllers(f)
		if err != nil {
			t.Fatalf("%s: configuration %d of 2 (kustomize, chart): %v\n%s", name, i+1, err, text)
		}
		slices.Sort(r)
		runs[i] = r
		if err := yaml.Unmarshal([]byte(text), &maps[i]); err != nil {
			t.Fatal(err)
		}
		m := maps[i]
		if mgr, ok := m["manager"].(map[string]any); ok {
			delete(mgr, "controllers")
			if mgr["securePort"] == 10261 {
				delete(mgr, "securePort")
			}
			if len(mgr) == 0 {
				delete(m, "manager")
			}
		}
		if le, ok := m["leaderElection"].(map[string]any); ok && le["leaderElect"] == true {
			delete(le, "leaderElect")
		}
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Errorf("%s runs controllers %v, the chart %v", name, runs[0], runs[1])
	}
	if !reflect.DeepEqual(maps[0], maps[1]) {
		t.Errorf("%s's configuration differs from the chart's:\n%s\nchart:\n%s", name, ws, gs)
	}
}
