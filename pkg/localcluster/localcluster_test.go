package localcluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{name: "control plane only", cfg: Config{}},
		{name: "fake nodes without a client are valid: Start sets the cluster's",
			cfg: Config{FakeNodes: &fakenode.Config{Nodes: 3, Zones: []fakenode.Zone{{Name: "zone-a", Count: 2}, {Name: "zone-b", Count: 1}}}}},
		{name: "fake node defaults fill the count from the zones",
			cfg: Config{FakeNodes: &fakenode.Config{Zones: []fakenode.Zone{{Name: "zone-a", Count: 2}}}}},
		{name: "every error at once",
			cfg: Config{
				ControlPlane:    controlplane.Config{ReadyTimeout: -time.Second},
				RegisterTimeout: -time.Second,
				FakeNodes:       &fakenode.Config{Nodes: 4, Zones: []fakenode.Zone{{Name: "zone-a", Count: 2}}, LeaseDuration: time.Second, LeaseRenewInterval: 2 * time.Second},
			},
			want: []string{"control plane ready timeout must not be negative", "fake node register timeout must not be negative",
				"fake nodes: zones: the counts add up to 2 but 4 nodes were asked for",
				"node lease renew interval (2s) must be shorter than the lease duration (1s)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "client") {
				t.Errorf("the client is not the caller's business: %v", err)
			}
		})
	}
}

func TestValidateLeavesTheConfigAlone(t *testing.T) {
	nodes := &fakenode.Config{Nodes: 2}
	cfg := Config{FakeNodes: nodes}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if nodes.NamePrefix != "" || len(nodes.Zones) != 0 {
		t.Errorf("Validate completed the caller's fake node config: %+v", nodes)
	}
}

func TestDefaults(t *testing.T) {
	if got := (&Config{}).registerTimeout(); got != DefaultRegisterTimeout {
		t.Errorf("register timeout %v, want %v", got, DefaultRegisterTimeout)
	}
	if got := (&Config{RegisterTimeout: time.Minute}).registerTimeout(); got != time.Minute {
		t.Errorf("register timeout %v, want 1m", got)
	}
	o := WaitOptions{}
	o.complete()
	if o.Interval != DefaultPollInterval || o.ProgressEvery != DefaultProgressEvery || o.Progress == nil {
		t.Errorf("wait defaults: %+v", o)
	}
}

// TestStopWithoutStart: a cluster whose Start failed early is stopped by
// Start; Stop must cope with parts that never started, twice.
func TestStopWithoutStart(t *testing.T) {
	c := &Cluster{}
	c.Stop()
	c.Stop()
	var n *Nodes
	n.Stop()
}

func TestWaitReportsProgressAndTheLastStatus(t *testing.T) {
	calls := 0
	var progress []string
	err := Wait(context.Background(), "things", func(context.Context) (string, bool) {
		calls++
		return "call " + string(rune('0'+calls)), calls == 3
	}, WaitOptions{Interval: time.Millisecond, ProgressEvery: time.Nanosecond, Progress: func(s string, done bool) {
		if done {
			s += " (done)"
		}
		progress = append(progress, s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"call 1", "call 2", "call 3 (done)"}; strings.Join(progress, "|") != strings.Join(want, "|") {
		t.Errorf("progress %q, want %q", progress, want)
	}
}

func TestWaitTimesOutWithTheLastStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := Wait(ctx, "nodes", func(context.Context) (string, bool) { return "1/3 nodes", false }, WaitOptions{Interval: time.Millisecond})
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a WaitError of the deadline", err)
	}
	if want := "waiting for nodes (1/3 nodes): context deadline exceeded"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestWaitEndsWhenAPartStops(t *testing.T) {
	failed := make(chan error, 1)
	boom := errors.New("boom")
	started := make(chan struct{})
	// The part stops at once; the wait must end with its error.
	tk := startTask(context.Background(), "fake nodes", func(context.Context) error { close(started); return boom }, failed)
	<-started
	err := Wait(context.Background(), "nodes", func(context.Context) (string, bool) { return "", false }, WaitOptions{Interval: time.Millisecond, Failed: failed})
	var se *StoppedError
	if !errors.As(err, &se) || !errors.Is(err, boom) || err.Error() != "fake nodes stopped: boom" {
		t.Fatalf("got %v, want the part's StoppedError", err)
	}
	tk.stop()
	tk.stop()
}

// TestTaskStoppedOnPurposeIsNoFailure: a part that returns because the
// cluster stops (or its context ends) is not reported as failed.
func TestTaskStoppedOnPurposeIsNoFailure(t *testing.T) {
	failed := make(chan error, 1)
	tk := startTask(context.Background(), "controllers", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, failed)
	tk.stop()
	ctx, cancel := context.WithCancel(context.Background())
	tk2 := startTask(ctx, "fake nodes", func(ctx context.Context) error { <-ctx.Done(); return nil }, failed)
	cancel()
	<-tk2.done
	select {
	case err := <-failed:
		t.Errorf("reported as failed: %v", err)
	default:
	}
}

func TestStoppedErrorWithoutCause(t *testing.T) {
	if got := (&StoppedError{Part: "controllers"}).Error(); got != "controllers stopped" {
		t.Errorf("got %q", got)
	}
}

func TestReadyRules(t *testing.T) {
	ready := v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}
	notReadyTaint := v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}
	other := v1.Taint{Key: "example.com/other", Effect: v1.TaintEffectNoSchedule}
	nodes := []v1.Node{
		{Status: ready},
		{Status: ready, Spec: v1.NodeSpec{Taints: []v1.Taint{notReadyTaint}}},
		{Status: ready, Spec: v1.NodeSpec{Taints: []v1.Taint{other}}},
		{}, // no Ready condition
	}
	if got := CountNodes(nodes, ReadyWithoutNotReadyTaint); got != 2 {
		t.Errorf("ReadyWithoutNotReadyTaint counts %d, want 2", got)
	}
	if got := CountNodes(nodes, ReadyWithoutTaints); got != 1 {
		t.Errorf("ReadyWithoutTaints counts %d, want 1", got)
	}
}
