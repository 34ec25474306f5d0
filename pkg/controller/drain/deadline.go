package drain

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// deadlineSlack is how long past its deadline a drain's calls may still be
// in flight before they are cut: the loop looks at the deadline every
// pollInterval and then fails the drain (or goes on for force-after) by
// itself, well within it even on a busy machine; the cut is for a call that
// does not return in time (a hung eviction, a read that never answers),
// which would otherwise hold the drain, and its budget slot, past its
// timeout.
const deadlineSlack = 5 * time.Second

// errDrainTimedOut cuts a drain's calls at its deadline (plus deadlineSlack).
var errDrainTimedOut = errors.New("the drain's deadline (--drain-timeout) passed while a call to the API server was in flight")

// watchdog cancels a context at a time of the controller's clock (so that
// unit tests step it), unless moved later first.
type watchdog struct {
	clk    clock.WithTicker
	cancel func()
	mu     sync.Mutex
	at     time.Time
	timer  clock.Timer
	fired  bool
	// done ends the goroutines of the timers set (stop closes it).
	done    chan struct{}
	stopped bool
}

// newWatchdog calls cancel once the clock reaches at (at once if it has).
func newWatchdog(clk clock.WithTicker, at time.Time, cancel func()) *watchdog {
	w := &watchdog{clk: clk, cancel: cancel, done: make(chan struct{})}
	w.set(at)
	return w
}

// set arms the watchdog for at, replacing the time set before; it says
// false when the watchdog has fired already (a cut context stays cut).
func (w *watchdog) set(at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return false
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.at = at
	t := w.clk.NewTimer(at.Sub(w.clk.Now()))
	w.timer = t
	go func() {
		select {
		case <-t.C():
		case <-w.done:
			return
		}
		w.mu.Lock()
		if w.timer != t || w.fired { // re-armed meanwhile
			w.mu.Unlock()
			return
		}
		w.fired = true
		w.mu.Unlock()
		w.cancel()
	}()
	return true
}

// extend moves the watchdog to at when that is later than its time.
func (w *watchdog) extend(at time.Time) {
	w.mu.Lock()
	later := at.After(w.at)
	w.mu.Unlock()
	if later {
		w.set(at)
	}
}

// stop disarms the watchdog for good.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fired = true
	if !w.stopped {
		w.stopped = true
		close(w.done)
		if w.timer != nil {
			w.timer.Stop()
		}
	}
}

// bounded bounds one API call (a read or a write, with the reads that
// prepare it) by kube.WriteTimeout: a request that never answers must not
// hold a drain or the controller's worker.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, kube.WriteTimeout)
}
