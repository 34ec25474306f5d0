package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// leadResult is how the controllers run by a leader ended.
type leadResult struct {
	err  error
	lost bool // leadership was lost while ctx was still live
}

// lead elects a leader on the Lease and runs the controllers while this
// process leads. On shutdown (ctx ends) the controllers stop first, within
// StopTimeout, and only then is the Lease released, so that a successor never
// runs next to controllers that are still writing.
func (m *manager) lead(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	le := m.opts.LeaderElection
	id := m.opts.Identity
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().UnixNano()%100000) // arch:allow a unique identity suffix, not a measure of time
	}
	lock := &guardedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.ResourceName, Namespace: le.ResourceNamespace},
		Client:     m.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}, running: m.running.Load}

	// The election outlives ctx: it ends (and releases the Lease) when lead
	// has seen the controllers stop.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var gate leadGate
	done := make(chan leadResult, 1) // OnStartedLeading sends at most once
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: le.ResourceName, ReleaseOnCancel: true,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				if gate.enter() {
					logger.Info("Became the leader", "identity", id, "lease", le.ResourceNamespace+"/"+le.ResourceName)
					done <- m.runWhileLeading(ctx, leading)
				}
			},
			OnStoppedLeading: func() { logger.V(2).Info("Left the election", "identity", id) },
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Another replica leads; standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// Ready from here on (see manager.ready): a standby serves health and
	// takes over on failure; becoming the leader does not make it unready.
	m.ready.Store(true)
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		elector.Run(electCtx)
	}()

	var res leadResult
	select {
	case res = <-done:
	case <-ctx.Done():
		if gate.close() {
			res = <-done // runWhileLeading is bounded by StopTimeout
		}
	}
	stopElecting()
	<-elected // releasing is bounded by RenewDeadline
	if res.lost {
		// Controllers must not run without the lease; exit so that the
		// process restarts as a standby.
		return errors.Join(fmt.Errorf("lost leadership of %s/%s", le.ResourceNamespace, le.ResourceName), res.err)
	}
	return res.err
}

// runWhileLeading runs the controllers until ctx ends or leading (the
// elector's context) ends because the Lease could not be renewed.
func (m *manager) runWhileLeading(ctx, leading context.Context) leadResult {
	m.isLeader.Set(1)
	defer m.isLeader.Set(0)
	cctx, cancel := context.WithCancel(leading)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	err := m.runUntilStopped(cctx)
	return leadResult{err: err, lost: leading.Err() != nil && ctx.Err() == nil}
}

// leadGate settles the race between becoming the leader and shutting down:
// after close, no controller starts, and close tells whether one had.
type leadGate struct {
	mu      sync.Mutex
	closed  bool
	entered bool
}

func (g *leadGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered = !g.closed
	return g.entered
}

func (g *leadGate) close() (entered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return g.entered
}

// guardedLock refuses to release the Lease (an update that clears the
// holder) while controllers run: client-go releases on cancel, and also after
// a failed renewal, neither of which waits for our controllers. A refused
// release leaves the Lease to expire, which is safe.
type guardedLock struct {
	resourcelock.Interface
	running func() bool
}

var errReleaseWhileRunning = errors.New("not releasing the lease while controllers are still running")

func (l *guardedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if rec.HolderIdentity == "" && l.running() {
		return errReleaseWhileRunning
	}
	return l.Interface.Update(ctx, rec)
}
