package localcluster

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Wait defaults.
const (
	DefaultPollInterval  = 200 * time.Millisecond
	DefaultProgressEvery = 5 * time.Second
)

// WaitOptions say how to wait and report progress.
type WaitOptions struct {
	// Interval between checks; DefaultPollInterval when zero.
	Interval time.Duration
	// ProgressEvery is how often Progress hears of a condition that does not
	// hold yet; DefaultProgressEvery when zero.
	ProgressEvery time.Duration
	// Progress, when set, gets the condition's status while waiting, and
	// once more with done when it holds.
	Progress func(status string, done bool)
	// Failed ends the wait with its error: a part of the cluster stopped.
	Failed <-chan error
}

func (o *WaitOptions) complete() {
	if o.Interval <= 0 {
		o.Interval = DefaultPollInterval
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.Progress == nil {
		o.Progress = func(string, bool) {}
	}
}

// WaitError is a condition that did not hold before the context ended.
type WaitError struct {
	What   string // what was waited for
	Status string // the condition's last status
	Err    error  // the context's error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("waiting for %s (%s): %v", e.What, e.Status, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Wait checks cond at once and then every interval until it holds (nil), ctx
// ends (a *WaitError) or a part of the cluster stops (its *StoppedError).
// cond returns a short status such as "3/6 nodes Ready".
func Wait(ctx context.Context, what string, cond func(context.Context) (status string, done bool), opts WaitOptions) error {
	opts.complete()
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		status, ok := cond(ctx)
		if ok {
			opts.Progress(status, true)
			return nil
		}
		if time.Since(lastProgress) >= opts.ProgressEvery {
			opts.Progress(status, false)
			lastProgress = time.Now()
		}
		select {
		case <-ctx.Done():
			return &WaitError{What: what, Status: status, Err: ctx.Err()}
		case err := <-opts.Failed:
			return err
		case <-tick.C:
		}
	}
}

// Wait is Wait ended also by the cluster's in-process parts stopping.
func (c *Cluster) Wait(ctx context.Context, what string, cond func(context.Context) (string, bool), opts WaitOptions) error {
	opts.Failed = c.failed
	return Wait(ctx, what, cond, opts)
}

// NodesReadyWhat is what WaitNodesReady waits for, as its errors name it.
const NodesReadyWhat = "nodes Ready and untainted"

// ReadyWithoutNotReadyTaint says whether a node is Ready and the node
// lifecycle controller has lifted the not-ready taint of its registration:
// pods can be scheduled on it.
func ReadyWithoutNotReadyTaint(n *v1.Node) bool {
	return kube.NodeReady(n) && !kube.HasTaint(n, v1.TaintNodeNotReady)
}

// ReadyWithoutTaints says whether a node is Ready and carries no taint at all.
func ReadyWithoutTaints(n *v1.Node) bool {
	return kube.NodeReady(n) && len(n.Spec.Taints) == 0
}

// WaitNodesReady waits until at least want nodes are ready by ready
// (ReadyWithoutNotReadyTaint when nil). It lists from the watch cache: cheap
// with thousands of nodes.
func WaitNodesReady(ctx context.Context, client kubernetes.Interface, want int, ready func(*v1.Node) bool, opts WaitOptions) error {
	if ready == nil {
		ready = ReadyWithoutNotReadyTaint
	}
	return Wait(ctx, NodesReadyWhat, func(ctx context.Context) (string, bool) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return "listing nodes: " + err.Error(), false
		}
		n := CountNodes(list.Items, ready)
		return fmt.Sprintf("%d/%d %s", n, want, NodesReadyWhat), n >= want
	}, opts)
}

// CountNodes counts the nodes that are ready by ready.
func CountNodes(nodes []v1.Node, ready func(*v1.Node) bool) int {
	n := 0
	for i := range nodes {
		if ready(&nodes[i]) {
			n++
		}
	}
	return n
}

// WaitNodesReady waits until every fake or hollow node of the cluster is Ready without
// the not-ready taint, or a part of the cluster stops.
func (c *Cluster) WaitNodesReady(ctx context.Context, opts WaitOptions) error {
	want := 0
	if m := c.Nodes(); m != nil {
		want = len(m.NodeNames())
	}
	if c.hollow != nil {
		want += len(c.hollow.Names())
	}
	opts.Failed = c.failed
	return WaitNodesReady(ctx, c.client, want, nil, opts)
}
