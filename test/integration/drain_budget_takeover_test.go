package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// lateProxy is an HTTPS reverse proxy in front of kube-apiserver that takes
// the first cordon of a node (a PATCH setting spec.unschedulable) off the
// wire: the client gets no answer, as when a request is stuck between a
// client and the API server, and the test sends it on to the API server
// later (Land), after the client gave up on it: a write that lands late.
// Every other request passes.
type lateProxy struct {
	srv      *httptest.Server
	target   *url.URL
	upstream *http.Transport
	caPEM    []byte

	mu   sync.Mutex
	held *http.Request // with its body in body
	body []byte
	node string
	got  chan struct{}
}

func startLateProxy(t *testing.T, cfg *rest.Config) *lateProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("late proxy: no CA in the control plane's configuration")
	}
	p := &lateProxy{target: target, got: make(chan struct{}),
		upstream: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport: p.upstream, FlushInterval: -1}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.take(r) {
			<-r.Context().Done() // no answer: the client gives up
			return
		}
		rp.ServeHTTP(w, r)
	}))
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	t.Cleanup(func() { p.srv.CloseClientConnections(); p.srv.Close(); p.upstream.CloseIdleConnections() })
	return p
}

// take holds the request if it is the first cordon.
func (p *lateProxy) take(r *http.Request) bool {
	res, sub, name := nodePath(r.URL.Path)
	if r.Method != http.MethodPatch || res != "nodes" || sub != "" {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || !strings.Contains(string(body), `"unschedulable":true`) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		return false
	}
	p.held, p.body, p.node = r.Clone(context.Background()), body, name
	close(p.got)
	return true
}

// nodePath splits /api/v1/nodes/NAME[/SUB].
func nodePath(path string) (res, sub, name string) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(path, "/api/v1/"), "/"), "/")
	if len(parts) > 0 {
		res = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = parts[2]
	}
	return
}

// Land sends the held cordon to the API server now and returns its status.
func (p *lateProxy) Land(ctx context.Context) (int, string, error) {
	p.mu.Lock()
	held, body := p.held, p.body
	p.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, held.Method, p.target.String()+held.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header = held.Header.Clone()
	resp, err := p.upstream.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (p *lateProxy) RESTConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = p.srv.URL
	c.TLSClientConfig = rest.TLSClientConfig{CAData: p.caPEM}
	return c
}

// TestDrainBudgetLateWriteOfOldLeader (issue 45, hole 4f, drain part):
// --max-cordoned-nodes=1. The old leader cordons the second node, and its
// request is stuck on the way (the client gets no answer). The old leader
// then stops, as on losing the Lease (its manager cancels the controllers:
// the write is given up). The first node matches too, and a new leader
// starts. The old leader's cordon lands after the new leader's first LIST,
// well within --drain-start-hold. The new leader starts no cordon before
// its hold is over and it has read every node afresh: it then counts the
// landed cordon, and the first node waits on --max-cordoned-nodes. At no
// moment are two nodes cordoned by the drain controller. Without the hold,
// the new leader cordons the first node at once and the late cordon makes
// two. (The hold covers writes that land within it after the old leader
// stopped; docs/drain.md gives the argument.)
func TestDrainBudgetLateWriteOfOldLeader(t *testing.T) {
	const hold = 30 * time.Second // generous: the late write must land within it on a busy machine
	cp, client := teCluster(t)
	m := framework.StartFakeNodes(t, quietNodes(client, 2))
	names := m.NodeNames()
	first, second := names[0], names[1] // the new leader looks at first before second (LIST order)
	waitNodesReadyOnly(t, client, names...)
	watch := watchCordons(t, client)
	conf := func(hold time.Duration) func(*drain.Config) {
		return func(d *drain.Config) { d.Budget.MaxCordonedNodes, d.StartHold = "1", hold }
	}
	drainOnly := func(o *manager.Options) { o.Controllers = []string{drain.Name} }

	late := startLateProxy(t, cp.RESTConfig())
	old := framework.StartNodeShepherd(t, late.RESTConfig(cp.RESTConfig()), budgetDrainConfig(conf(0)), drainOnly)
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, second)
	select {
	case <-late.got:
	case <-time.After(2 * time.Minute):
		t.Fatal("the old leader sent no cordon")
	}
	if late.node != second {
		t.Fatalf("held the cordon of %s, want %s", late.node, second)
	}
	// The first node matches too, for longer than the rule's minimum (1s)
	// when the new leader starts, so that the new leader looks at it first.
	// The old leader's one worker waits on its cordon meanwhile (at most
	// kube.WriteTimeout, 15 s: it is stopped well before).
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, first)
	time.Sleep(2 * time.Second) // the rule's minimum duration, on the node's one-second clock
	old.Stop()                  // as on losing the Lease: its writes are given up
	stopped := time.Now()
	t.Logf("the old leader's cordon of %s is in flight; the old leader stopped", second)
	for _, n := range names {
		if getNode(t, client, n).Spec.Unschedulable {
			t.Fatalf("%s cordoned before the new leader started", n)
		}
	}

	leader := framework.StartNodeShepherd(t, cp.RESTConfig(), budgetDrainConfig(conf(hold)), drainOnly)
	// The new leader has listed the nodes: it either cordons the first node
	// at once (the hole) or waits on its start hold.
	framework.Eventually(t, time.Minute, "the new leader cordons "+first+" or holds", func(ctx context.Context) (bool, string, error) {
		if n := getNode(t, client, first); n.Spec.Unschedulable {
			return true, "cordoned", nil
		}
		_, msgs := eventsNow(ctx, client, nodeEvents(first, drain.EventCordonWaiting))
		return strings.Contains(strings.Join(msgs, "\n"), "--drain-start-hold"), fmt.Sprintf("events %q", msgs), nil
	})
	code, body, err := late.Land(framework.Context(t))
	if err != nil || code != http.StatusOK {
		t.Fatalf("the late cordon did not land: %d %v %s", code, err, body)
	}
	if since := time.Since(stopped); since > hold/2 {
		t.Fatalf("the late cordon landed %v after the old leader stopped: too slow to exercise a %v hold", since, hold)
	}
	t.Logf("the old leader's cordon of %s landed %v after it stopped", second, time.Since(stopped).Round(time.Millisecond))
	// The new leader's own verdict (its metrics; the old one said the same
	// as it stopped, counting its write whose answer it never got).
	framework.Eventually(t, 2*time.Minute, "the new leader holds "+first+" on --max-cordoned-nodes after its hold", func(ctx context.Context) (bool, string, error) {
		if err := watch.check(1, 0); err != nil {
			return false, "", err
		}
		v := leader.Metric(t, "nodeshepherd_drain_nodes_waiting", map[string]string{"action": "cordon", "budget": "max-cordoned-nodes"})
		h := leader.Metric(t, "nodeshepherd_drain_nodes_waiting", map[string]string{"budget": drain.BudgetStartHold})
		return v == 1 && h == 0, fmt.Sprintf("waiting on max-cordoned-nodes %v, on start-hold %v", v, h), nil
	})
	if n := getNode(t, client, second); !n.Spec.Unschedulable || !ownedByDrain(n) {
		t.Errorf("%s not cordoned by the late write", second)
	}
	if err := watch.check(1, 0); err != nil {
		t.Fatal(err)
	}
}
