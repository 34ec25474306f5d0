package framework

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// NodeShepherd is an in-process `nodeshepherd run`, or the address of one
// started as a process. Its /metrics, /healthz, /readyz and /livez are read
// on plain HTTP (a local run's --metrics-bind-address, on loopback) unless
// Secure is set: then on HTTPS (--secure-port), with Token as the bearer
// token when not empty, the self-signed certificate not verified (as
// Prometheus is told for kube-controller-manager's).
type NodeShepherd struct {
	Addr   string // HOST:PORT of /metrics, /healthz, /readyz, /livez
	Secure bool
	Token  string
	cancel context.CancelFunc
	done   chan error
}

var insecureTLSClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the server's certificate is self-signed
}}

// Get asks the server for path (/metrics, /healthz...).
func (n *NodeShepherd) Get(ctx context.Context, path string) (*http.Response, error) {
	scheme, client := "http", http.DefaultClient
	if n.Secure {
		scheme, client = "https", insecureTLSClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+n.Addr+path, nil)
	if err != nil {
		return nil, err
	}
	if n.Token != "" {
		req.Header.Set("Authorization", "Bearer "+n.Token)
	}
	return client.Do(req)
}

// StartNodeShepherd runs the controllers against cfg, selected as `run
// --controllers=*` selects them (leader election off unless opts turns it on) until the test ends or Stop is called.
func StartNodeShepherd(t testing.TB, cfg *rest.Config, ctrl controllers.Config, opts func(*manager.Options)) *NodeShepherd {
	t.Helper()
	addr := make(chan string, 1)
	o := manager.Options{
		Controllers: ctrl.Select(controllers.Names, nil), Constructors: controllers.Constructors(ctrl),
		MetricsBindAddress: "127.0.0.1:0", OnServing: func(a string) { addr <- a },
	}
	if opts != nil {
		opts(&o)
	}
	if asServiceAccount() {
		cfg = ServiceAccountConfig(t, cfg, o.Controllers)
		if o.LeaderElection.Enabled {
			o.LeaderElection.ResourceNamespace = DeployNamespace // where deploy/ grants the Lease
		}
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 50, 100
	ctx, cancel := context.WithCancel(Context(t))
	n := &NodeShepherd{cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- manager.Run(ctx, c, o) }()
	t.Cleanup(n.Stop)
	select {
	case n.Addr = <-addr:
	case err := <-n.done:
		t.Fatalf("nodeshepherd stopped at start: %v", err)
	case <-time.After(2 * time.Minute): // a busy machine under -race
		t.Fatal("nodeshepherd did not serve within 2m")
	}
	Eventually(t, 2*time.Minute, "nodeshepherd ready", func(ctx context.Context) (bool, string, error) {
		resp, err := n.Get(ctx, "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return n
}

// Stop ends the controllers and waits for them; safe to call twice.
func (n *NodeShepherd) Stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
	n.cancel = nil
}

// Families scrapes /metrics once, every family by name (a histogram's
// buckets, which Metric folds into its count).
func (n *NodeShepherd) Families(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := n.Get(context.Background(), "/metrics") // the client has a timeout
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	return families
}

// Metric returns the value of a counter or gauge (the sum of a histogram's
// observations count) whose labels include the given ones, summed over
// matching series; 0 when absent.
func (n *NodeShepherd) Metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	fam := n.Families(t)[name]
	if fam == nil {
		return 0
	}
	sum := 0.0
	for _, m := range fam.Metric {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.Label {
			if l.GetName() == k && (l.GetValue() == v || strings.HasSuffix(l.GetValue(), ":"+v)) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
