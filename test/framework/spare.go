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
	mu   sync.Mutex
	key  string
	done chan struct{} // closed when cp or err is set
	cp   *controlplane.ControlPlane
	err  error
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
	defer s.mu.Unlock()
	if s.done != nil && s.key == key {
		<-s.done
		cp, err = s.cp, s.err
		if err != nil {
			// A spare that failed to start says nothing about this test's
			// control plane: start one in the foreground instead.
			t.Logf("the spare control plane did not start (%v); starting one for this test", err)
			cp, err = nil, nil
		}
	} else {
		s.discardLocked()
	}
	if cp == nil {
		cp, err = controlplane.Start(Context(t), cfg)
	}
	s.key, s.cp, s.err = key, nil, nil
	s.done = make(chan struct{})
	go func(done chan struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, e := controlplane.Start(klog.NewContext(ctx, logr.Discard()), cfg)
		s.mu.Lock()
		mine := s.done == done
		if mine {
			s.cp, s.err = c, e
		}
		s.mu.Unlock()
		if !mine && c != nil {
			c.Stop() // discarded while it started
		}
		close(done)
	}(s.done)
	return cp, err, true
}

// discardLocked stops the spare (once it has started) in the background.
func (s *sparePlane) discardLocked() {
	if s.done == nil {
		return
	}
	done := s.done
	cp := s.cp
	s.done, s.cp, s.err, s.key = nil, nil, nil, ""
	go func() {
		<-done
		if cp != nil {
			cp.Stop()
		}
	}()
}

// StopSpare stops the spare control plane and waits for it: TestMain calls it
// after the tests, so that no etcd or kube-apiserver outlives the test binary.
func StopSpare() {
	s := spare
	s.mu.Lock()
	done := s.done
	s.done, s.key = nil, ""
	s.mu.Unlock()
	if done == nil {
		return
	}
	<-done
	s.mu.Lock()
	cp := s.cp
	s.cp, s.err = nil, nil
	s.mu.Unlock()
	if cp != nil {
		cp.Stop()
	}
}

// Main runs a test binary's tests and stops the spare control plane after
// them: func TestMain(m *testing.M) { framework.Main(m) }.
func Main(m *testing.M) {
	spareUsed = true
	code := m.Run()
	StopSpare()
	os.Exit(code)
}
