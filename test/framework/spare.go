package framework

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
)

// A control plane takes seconds to start on a busy 2-core machine (etcd,
// kube-apiserver's bootstrap, kube-controller-manager and kube-scheduler
// when asked for), and most integration tests start one. StartControlPlane
// therefore keeps one spare: when a test takes a control plane, another one
// of the same configuration starts in the background while that test runs
// (which mostly waits), and the next test that asks for that configuration
// gets it ready. Each test still has a control plane of its own that nothing
// else ever used: a spare is handed out once and stopped with its test.
//
// Only test binaries whose TestMain calls Main keep a spare (integration and
// chaos; not the benchmarks, where a control plane starting beside the
// measurement would skew it), and NODESHEPHERD_TEST_SPARE=0 turns it off.
var (
	spare     = &sparePlane{}
	spareUsed bool // set by Main before any test runs
)

type sparePlane struct {
	mu      sync.Mutex
	key     string
	pending *startup // the spare, starting or started; nil when there is none
}

// startup is one control plane starting in the background.
type startup struct {
	done chan struct{} // closed once cp and err are set (and cp stopped if discarded)
	mu   sync.Mutex
	cp   *controlplane.ControlPlane
	err  error
	// discarded: nobody will take it; whoever sees it last stops cp.
	discarded bool
}

func spareEnabled() bool { return spareUsed && os.Getenv("NODESHEPHERD_TEST_SPARE") != "0" }

// configKey identifies the control planes that are interchangeable: those
// of one configuration, apart from where their files go.
func configKey(cfg controlplane.Config) (string, bool) {
	if cfg.Dir != "" {
		return "", false // the test wants its files in a place of its own
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// take returns a running control plane of cfg: the spare when it has that
// configuration and started, else a new one; then starts the next spare of
// cfg. ok is false when cfg cannot be shared (the caller starts its own).
func (s *sparePlane) take(t testing.TB, cfg controlplane.Config) (cp *controlplane.ControlPlane, err error, ok bool) {
	key, ok := configKey(cfg)
	if !ok || !spareEnabled() {
		return nil, nil, false
	}
	s.mu.Lock()
	st, match := s.pending, s.pending != nil && s.key == key
	s.pending, s.key = nil, ""
	s.mu.Unlock()
	switch {
	case match:
		<-st.done
		if st.err != nil {
			// A spare that failed to start says nothing about this test's
			// control plane: start one in the foreground instead.
			t.Logf("the spare control plane did not start (%v); starting one for this test", st.err)
		}
		cp = st.cp
	case st != nil:
		if c := st.discard(); c != nil {
			go c.Stop()
		}
	}
	if cp == nil {
		cp, err = controlplane.Start(Context(t), cfg)
	}
	next := &startup{done: make(chan struct{})}
	go next.start(cfg)
	s.mu.Lock()
	s.pending, s.key = next, key
	s.mu.Unlock()
	return cp, err, true
}

func (st *startup) start(cfg controlplane.Config) {
	defer close(st.done)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := controlplane.Start(klog.NewContext(ctx, logr.Discard()), cfg)
	st.mu.Lock()
	st.cp, st.err = c, err
	discarded := st.discarded
	st.mu.Unlock()
	if discarded && c != nil {
		c.Stop()
	}
}

// discard marks the spare as not wanted and returns its control plane when
// it has started (the caller stops it); one still starting stops itself.
func (st *startup) discard() *controlplane.ControlPlane {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.discarded = true
	return st.cp
}

// StopSpare stops the spare control plane and waits for it: TestMain calls it
// after the tests, so that no etcd or kube-apiserver outlives the test binary.
func StopSpare() {
	s := spare
	s.mu.Lock()
	st := s.pending
	s.pending, s.key = nil, ""
	s.mu.Unlock()
	if st == nil {
		return
	}
	if c := st.discard(); c != nil {
		c.Stop()
	}
	<-st.done
}

// Main runs a test binary's tests and stops the spare control plane after
// them: func TestMain(m *testing.M) { framework.Main(m) }.
func Main(m *testing.M) {
	spareUsed = true
	code := m.Run()
	StopSpare()
	os.Exit(code)
}
