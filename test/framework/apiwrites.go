package framework

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// APIWrites reads kube-apiserver's apiserver_request_total and returns the
// number of mutating requests (POST, PUT, PATCH, DELETE) so far per resource,
// with the subresource appended ("pods/status") and, for requests that did
// not succeed, the response code ("nodes 409").
func APIWrites(t testing.TB, client kubernetes.Interface) map[string]float64 {
	t.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(Context(t))
	if err != nil {
		t.Fatalf("reading kube-apiserver metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing kube-apiserver metrics: %v", err)
	}
	out := map[string]float64{}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return out
	}
	for _, m := range fam.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE":
		default:
			continue
		}
		key := labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		if code := labels["code"]; code != "" && code[0] != '2' {
			key += " " + code
		}
		out[key] += m.Counter.GetValue()
	}
	return out
}

// Diff returns after minus before for every key that changed.
func Diff(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
