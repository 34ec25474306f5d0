package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
)

// The events recorded just before shutdown are written, not dropped with
// the broadcaster's queue; the flush marker is not.
func TestShutdownSendsQueuedEvents(t *testing.T) {
	client := fake.NewClientset()
	e := startEvents(context.Background(), client)
	rec := e.NewRecorder(scheme.Scheme, v1.EventSource{Component: "test"})
	const n = 20
	for i := range n {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), UID: "u"}}
		rec.Event(node, v1.EventTypeNormal, "DrainAborted", "Drain stopped: lost leadership")
	}
	e.shutdown(context.Background(), clock.RealClock{}, time.Minute)
	l, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != n {
		t.Errorf("%d events written before shutdown returned, want %d", len(l.Items), n)
	}
	for _, ev := range l.Items {
		if ev.Reason == flushReason {
			t.Errorf("the flush marker was written: %+v", ev)
		}
	}
}
