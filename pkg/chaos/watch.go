package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watch feeds the checker from its own informers on the API server (nodes,
// pods, events, PodDisruptionBudgets, Leases), stamping each change with
// the moment it was seen, until ctx ends. The client must reach the API
// server directly, not through a fault proxy: the checker's view must not
// stall with the controllers'. It returns once the caches are synced.
func Watch(ctx context.Context, client kubernetes.Interface, c *Checker) error {
	w := &feed{ctx: ctx, who: "chaos checker"}
	f := w.factory(informers.NewSharedInformerFactory(client, 0))
	w.on(f.Core().V1().Nodes().Informer(), func(obj any, deleted bool) {
		if n, ok := obj.(*v1.Node); ok {
			c.ObserveNode(time.Now(), n, deleted)
		}
	})
	w.on(f.Core().V1().Pods().Informer(), func(obj any, deleted bool) {
		if p, ok := obj.(*v1.Pod); ok {
			c.ObservePod(time.Now(), p, deleted)
		}
	})
	w.on(f.Core().V1().Events().Informer(), func(obj any, deleted bool) {
		if e, ok := obj.(*v1.Event); ok && !deleted {
			c.ObserveEvent(time.Now(), e)
		}
	})
	w.on(f.Policy().V1().PodDisruptionBudgets().Informer(), func(obj any, deleted bool) {
		if p, ok := obj.(*policyv1.PodDisruptionBudget); ok {
			c.ObservePDB(time.Now(), p, deleted)
		}
	})
	w.on(f.Coordination().V1().Leases().Informer(), func(obj any, deleted bool) {
		if l, ok := obj.(*coordinationv1.Lease); ok && !deleted {
			c.ObserveLease(time.Now(), l)
		}
	})
	return w.run(c.Settle)
}

// feed is the informer plumbing of a checker's watch (Watch, WatchRepairs):
// its factories, the handlers that feed it, and their errors, which run
// reports, naming the checker (who). ctx bounds the whole watch.
type feed struct {
	ctx  context.Context
	who  string
	facs []informers.SharedInformerFactory
	errs []error
}

// factory adds f to the factories run starts and shuts down.
func (w *feed) factory(f informers.SharedInformerFactory) informers.SharedInformerFactory {
	w.facs = append(w.facs, f)
	return f
}

// on feeds every change of inf's objects to on; a deletion the watch missed
// (a relist found the object gone) is unwrapped to the last object seen.
func (w *feed) on(inf cache.SharedIndexInformer, on func(obj any, deleted bool)) {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(obj, false) },
		UpdateFunc: func(_, obj any) { on(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			on(obj, true)
		},
	})
	w.errs = append(w.errs, err)
}

// onBroken tells broken the moment of each error of the informers' watches
// but a watch's normal end (io.EOF), before the informer's usual backoff and
// relist: versions written while a watch is broken may never be delivered.
func (w *feed) onBroken(broken func(at time.Time), infs ...cache.SharedIndexInformer) {
	for _, inf := range infs {
		w.errs = append(w.errs, inf.SetWatchErrorHandler(func(r *cache.Reflector, err error) {
			if !errors.Is(err, io.EOF) {
				broken(time.Now())
			}
			cache.DefaultWatchErrorHandler(w.ctx, r, err)
		}))
	}
}

// run starts the factories and returns once their caches are synced; from
// then on it calls settle every second, so that pending checks are decided
// while nothing changes, and shuts the factories down when ctx ends.
func (w *feed) run(settle func(now time.Time)) error {
	for _, err := range w.errs {
		if err != nil {
			return fmt.Errorf("%s: %w", w.who, err)
		}
	}
	for _, f := range w.facs {
		f.Start(w.ctx.Done())
	}
	for _, f := range w.facs {
		for typ, ok := range f.WaitForCacheSync(w.ctx.Done()) {
			if !ok {
				return fmt.Errorf("%s: the %v watch did not sync", w.who, typ)
			}
		}
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-w.ctx.Done():
				for _, f := range w.facs {
					f.Shutdown()
				}
				return
			case now := <-t.C:
				settle(now)
			}
		}
	}()
	return nil
}
