package nodelifecycle

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Every write this controller sends is bounded by kube.WriteTimeout. A write
// whose answer never came (kube.Answered is false) may have landed, so it is
// neither taken as done nor as failed: lostWrites remembers it, and the next
// attempt re-checks the object before acting, so that a write that landed is
// neither sent twice nor left uncounted (its event, its metric, the pods of
// a node it marked Unknown).

// lostStatus is a Ready=Unknown status write of a node whose answer was lost.
type lostStatus struct {
	at       time.Time         // the lastTransitionTime sent
	observed *v1.NodeCondition // Ready before the write
	expiry   time.Time         // when the node's grace period ran out
	basedOn  string            // the resourceVersion the write started from
}

// lostWrites remembers the writes whose answer was lost (see above).
type lostWrites struct {
	mu sync.Mutex
	// taints: nodes whose last taint write got no answer; the next one
	// starts from a fresh read of the node, not the informer's copy.
	taints map[string]bool
	// statuses: nodes whose Ready=Unknown write got no answer.
	statuses map[string]lostStatus
	// marks and restores: pods whose NotReady mark or readiness restore got
	// no answer, with the lastTransitionTime sent (which tells, on the pod,
	// whether that write landed).
	marks    map[types.UID]time.Time
	restores map[types.UID]lostRestore
}

// lostRestore is a readiness restore whose answer was lost.
type lostRestore struct {
	at      time.Time // the lastTransitionTime sent
	verdict verdict
	msg     string
}

func setLost[K comparable, V any](mu *sync.Mutex, m *map[K]V, k K, v V) {
	mu.Lock()
	defer mu.Unlock()
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

// takeLost returns and forgets the entry of k. The map is passed by
// pointer, as to setLost, because setLost creates it: reading the field
// outside the lock races with that.
func takeLost[K comparable, V any](mu *sync.Mutex, m *map[K]V, k K) (V, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := (*m)[k]
	delete(*m, k)
	return v, ok
}

func peekLost[K comparable, V any](mu *sync.Mutex, m *map[K]V, k K) (V, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := (*m)[k]
	return v, ok
}

// forgetNode drops what is remembered about a deleted node.
func (l *lostWrites) forgetNode(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.taints, name)
	delete(l.statuses, name)
}

// forgetPod drops what is remembered about a pod that is gone.
func (l *lostWrites) forgetPod(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.marks, uid)
	delete(l.restores, uid)
}

// lost says whether err leaves the write's outcome unknown.
func lost(err error) bool { return err != nil && !kube.Answered(err) }

// sameSecond compares a time read back from the API server (whole seconds)
// with one sent.
func sameSecond(read metav1.Time, sent time.Time) bool {
	return read.Unix() == sent.Unix()
}
