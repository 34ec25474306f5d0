package manager

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// flushReason marks the last event sent through the broadcaster on shutdown;
// the sink swallows it.
const flushReason = "NodeShepherdFlush"

// eventBroadcaster is the broadcaster that the controllers' event recorders
// write through, to the API server and the log. It outlives the run's
// context (cancelling it would shut the broadcaster down) so that stopping
// controllers' events are still sent.
//
// client-go's Shutdown drops the events still queued for the sink, such as
// the DrainAborted of drains stopped because leadership was lost, just
// before the process exits. So shutdown first sends a marker through the
// same queue and waits, bounded, for the sink to reach it: the sink handles
// events in order, so every event before the marker has then been written
// (or refused by the API server, or folded by the correlator).
type eventBroadcaster struct {
	record.EventBroadcaster
	sink *flushingSink
}

func startEvents(ctx context.Context, client kubernetes.Interface) *eventBroadcaster {
	b := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	b.StartStructuredLogging(3)
	sink := &flushingSink{EventSink: &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, flushed: make(chan struct{})}
	b.StartRecordingToSink(sink)
	return &eventBroadcaster{EventBroadcaster: b, sink: sink}
}

// shutdown waits up to timeout for the events already recorded to be sent,
// then shuts the broadcaster down.
func (e *eventBroadcaster) shutdown(ctx context.Context, clk clock.Clock, timeout time.Duration) {
	defer e.Shutdown()
	marker := &v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: flushReason}
	e.NewRecorder(scheme.Scheme, v1.EventSource{Component: flushReason}).Event(marker, v1.EventTypeNormal, flushReason, "flush")
	t := clk.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.sink.flushed:
	case <-t.C():
		klog.FromContext(ctx).Info("Events still unsent at shutdown are dropped", "waited", timeout)
	}
}

// flushingSink writes events to the API server, except the flush marker,
// which it reports instead.
type flushingSink struct {
	record.EventSink
	once    sync.Once
	flushed chan struct{}
}

func (s *flushingSink) Create(e *v1.Event) (*v1.Event, error) {
	if e.Reason == flushReason && e.Source.Component == flushReason {
		s.once.Do(func() { close(s.flushed) })
		return e, nil
	}
	return s.EventSink.Create(e)
}
