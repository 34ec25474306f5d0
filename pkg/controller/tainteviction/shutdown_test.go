package tainteviction

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

// On shutdown a deletion attempt under way finishes before the controller's
// Run returns, and so before the manager releases the Lease.
func TestCancelAllWaitsForAttemptsUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		q := newTimedWorkers(clock.RealClock{}, func(string, timedWork) bool {
			close(started)
			<-release
			finished.Store(true)
			return false
		}, func(int) time.Duration { return time.Second })
		q.Add("default/p", &timedWork{due: time.Now()})
		<-started
		returned := make(chan struct{})
		go func() {
			q.CancelAll()
			close(returned)
		}()
		synctest.Wait() // CancelAll is blocked, or has returned
		select {
		case <-returned:
			t.Fatal("CancelAll returned while a deletion attempt was under way")
		default:
		}
		close(release)
		<-returned
		if !finished.Load() {
			t.Error("CancelAll returned before the attempt finished")
		}
	})
}
