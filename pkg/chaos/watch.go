package chaos

import (
	"context"
	"fmt"
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
	f := informers.NewSharedInformerFactory(client, 0)
	handler := func(on func(obj any, deleted bool)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { on(obj, false) },
			UpdateFunc: func(_, obj any) { on(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				on(obj, true)
			},
		}
	}
	add := func(inf cache.SharedIndexInformer, on func(obj any, deleted bool)) error {
		_, err := inf.AddEventHandler(handler(on))
		return err
	}
	errs := []error{
		add(f.Core().V1().Nodes().Informer(), func(obj any, deleted bool) {
			if n, ok := obj.(*v1.Node); ok {
				c.ObserveNode(time.Now(), n, deleted)
			}
		}),
		add(f.Core().V1().Pods().Informer(), func(obj any, deleted bool) {
			if p, ok := obj.(*v1.Pod); ok {
				c.ObservePod(time.Now(), p, deleted)
			}
		}),
		add(f.Core().V1().Events().Informer(), func(obj any, deleted bool) {
			if e, ok := obj.(*v1.Event); ok && !deleted {
				c.ObserveEvent(time.Now(), e)
			}
		}),
		add(f.Policy().V1().PodDisruptionBudgets().Informer(), func(obj any, deleted bool) {
			if p, ok := obj.(*policyv1.PodDisruptionBudget); ok {
				c.ObservePDB(time.Now(), p, deleted)
			}
		}),
		add(f.Coordination().V1().Leases().Informer(), func(obj any, deleted bool) {
			if l, ok := obj.(*coordinationv1.Lease); ok && !deleted {
				c.ObserveLease(time.Now(), l)
			}
		}),
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("chaos checker: %w", err)
		}
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("chaos checker: the %v watch did not sync", typ)
		}
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				f.Shutdown()
				return
			case now := <-t.C:
				c.Settle(now)
			}
		}
	}()
	return nil
}
