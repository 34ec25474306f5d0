package localcluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// stopGrace bounds how long Stop waits for an in-process part, so that a
// part that ignores its context cannot keep the control plane running.
const stopGrace = 30 * time.Second

// StoppedError is an in-process part (the fake nodes or the controllers)
// that returned while it should have been running.
type StoppedError struct {
	Part string
	Err  error
}

func (e *StoppedError) Error() string {
	if e.Err == nil {
		return e.Part + " stopped"
	}
	return fmt.Sprintf("%s stopped: %v", e.Part, e.Err)
}

func (e *StoppedError) Unwrap() error { return e.Err }

// task runs one in-process part in its own goroutine under its own context.
type task struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // valid after done is closed
}

// startTask runs run until stop or the end of ctx. If run returns before
// either, failed gets a StoppedError (without blocking: the first one counts).
func startTask(ctx context.Context, name string, run func(context.Context) error, failed chan<- error) *task {
	ctx, cancel := context.WithCancel(ctx)
	t := &task{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.err = run(ctx)
		if ctx.Err() == nil {
			select {
			case failed <- &StoppedError{Part: name, Err: t.err}:
			default:
			}
		}
	}()
	return t
}

// stop cancels the task and waits for it, at most stopGrace; nil-safe and
// safe to call twice.
func (t *task) stop() {
	if t == nil {
		return
	}
	t.cancel()
	select {
	case <-t.done:
	case <-time.After(stopGrace):
		klog.Background().Info("Warning: an in-process part of the local cluster did not stop in time; going on", "part", t.name, "waited", stopGrace)
	}
}

// Nodes are running fake nodes.
type Nodes struct {
	m      *fakenode.Manager
	task   *task
	failed chan error
}

// StartNodes runs fake nodes against cfg.Client until Stop or the end of ctx,
// and returns once every node is registered, or fails after timeout.
func StartNodes(ctx context.Context, cfg fakenode.Config, timeout time.Duration) (*Nodes, error) {
	return startNodes(ctx, cfg, timeout, make(chan error, 1))
}

func startNodes(ctx context.Context, cfg fakenode.Config, timeout time.Duration, failed chan error) (*Nodes, error) {
	m, err := fakenode.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("fake nodes: %w", err)
	}
	n := &Nodes{m: m, failed: failed}
	n.task = startTask(ctx, "fake nodes", m.Run, failed)
	if err := n.waitRegistered(ctx, timeout); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// waitRegistered waits until the manager has registered every node.
func (n *Nodes) waitRegistered(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-n.m.Ready():
		return nil
	case <-n.task.done:
		return fmt.Errorf("fake nodes stopped before they were registered: %v", n.task.err)
	case <-ctx.Done():
		return fmt.Errorf("registering the fake nodes: %w", ctx.Err())
	}
}

// Manager is the fake node manager: node names, zones, faults.
func (n *Nodes) Manager() *fakenode.Manager { return n.m }

// Failed receives an error when the fake nodes stop on their own.
func (n *Nodes) Failed() <-chan error { return n.failed }

// Stop stops the fake nodes and waits for them; nil-safe and safe to call twice.
func (n *Nodes) Stop() {
	if n != nil {
		n.task.stop()
	}
}
