package framework

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// fakeAPIServer is an HTTPS server standing in for kube-apiserver: the
// fault proxy's own behaviour needs no control plane. A watch
// (?watch=true) streams one line per value sent on lines; a PATCH is
// counted and answered 200.
type fakeAPIServer struct {
	srv     *httptest.Server
	patches atomic.Int32
	lines   chan string
	mu      sync.Mutex
	sent    map[string]time.Time // when each watch line left the server
}

func startFakeAPIServer(t *testing.T) (*fakeAPIServer, *rest.Config) {
	f := &fakeAPIServer{lines: make(chan string), sent: map[string]time.Time{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case l := <-f.lines:
					f.mu.Lock()
					f.sent[l] = time.Now()
					f.mu.Unlock()
					_, _ = io.WriteString(w, l+"\n")
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		case r.Method == http.MethodPatch:
			f.patches.Add(1)
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "{}")
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return f, &rest.Config{Host: f.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func proxyClient(t *testing.T, p *FaultProxy, cfg *rest.Config, timeout time.Duration) *http.Client {
	t.Helper()
	rt, err := rest.TransportFor(p.RESTConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt, Timeout: timeout}
}

// FaultLag relays a watch's events late by After, in order; the watch is
// open at once.
func TestFaultProxyLag(t *testing.T) {
	const lag = 400 * time.Millisecond
	api, cfg := startFakeAPIServer(t)
	p := StartFaultProxy(t, cfg)
	p.Inject(FaultRule{Name: "lag", Resource: "nodes", Watch: true, Kind: FaultLag, After: lag})
	resp, err := proxyClient(t, p, cfg, 0).Get(p.URL() + "/api/v1/nodes?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch answered %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		want := fmt.Sprintf("event-%d", i)
		api.lines <- want
		got, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if got = strings.TrimSpace(got); got != want {
			t.Fatalf("event %d: got %q, want %q (out of order)", i, got, want)
		}
		api.mu.Lock()
		sent := api.sent[want]
		api.mu.Unlock()
		if late := at.Sub(sent); late < lag {
			t.Fatalf("%s relayed %v after the API server sent it, want at least %v", want, late, lag)
		}
	}
	if n := p.Injected("lag"); n != 1 {
		t.Fatalf("lag injected %d times, want 1 (one watch)", n)
	}
}

// FaultHold holds a write until Release, and then forwards it even though
// its client gave up meanwhile: it lands late. Stop ends the holding of new
// writes, not of the held one.
func TestFaultProxyHoldForwardsLate(t *testing.T) {
	api, cfg := startFakeAPIServer(t)
	p := StartFaultProxy(t, cfg)
	hold := p.Inject(FaultRule{Name: "hold", Methods: []string{http.MethodPatch}, Resource: "nodes", Kind: FaultHold})
	c := proxyClient(t, p, cfg, 300*time.Millisecond)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPatch, p.URL()+"/api/v1/nodes/n1", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a held write was answered %d", resp.StatusCode)
	}
	Eventually(t, 10*time.Second, "the write held", func(context.Context) (bool, string, error) {
		return p.Held("hold") == 1, p.String(), nil
	})
	if n := api.patches.Load(); n != 0 {
		t.Fatalf("%d writes reached the API server while held", n)
	}
	// Stopped, the rule holds no new write, and keeps the one it holds.
	p.Stop(hold)
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodPatch, p.URL()+"/api/v1/nodes/n2", strings.NewReader("{}"))
	if resp, err := c.Do(req); err != nil {
		t.Fatalf("a write after Stop: %v", err)
	} else {
		resp.Body.Close()
	}
	if n, held := api.patches.Load(), p.Held("hold"); n != 1 || held != 1 {
		t.Fatalf("after Stop: %d writes reached the API server, %d held; want 1 and 1", n, held)
	}
	// A GET is not held.
	resp, err := c.Get(p.URL() + "/api/v1/nodes/n1")
	if err != nil {
		t.Fatalf("a read was held: %v", err)
	}
	resp.Body.Close()
	p.Release(hold)
	Eventually(t, 10*time.Second, "the held write forwarded after its client gave up", func(context.Context) (bool, string, error) {
		return api.patches.Load() == 2 && p.Held("hold") == 0, fmt.Sprintf("%d writes reached, %d held", api.patches.Load(), p.Held("hold")), nil
	})
	// Released: the next write passes at once.
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodPatch, p.URL()+"/api/v1/nodes/n1", strings.NewReader("{}"))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatalf("a write after the release: %v", err)
	}
	resp.Body.Close()
	if n := api.patches.Load(); n != 3 {
		t.Fatalf("%d writes reached the API server, want 3", n)
	}
	var reached int
	for _, e := range p.SettledLog() {
		if e.Fault == "hold" && e.Reached {
			reached++
		}
	}
	if reached != 1 {
		t.Fatalf("the log has %d held writes that reached the API server, want 1", reached)
	}
}
