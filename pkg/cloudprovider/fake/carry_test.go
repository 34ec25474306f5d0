package fake

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// recorded are Machines that note what they are asked; release, when set,
// holds WaitRegistered until it is closed.
type recorded struct {
	mine    map[string]bool
	release chan struct{}

	mu    sync.Mutex
	calls []string
}

func (m *recorded) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, s)
}

func (m *recorded) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *recorded) HasMachine(node string) bool { return m.mine[node] }
func (m *recorded) Reboot(_ context.Context, node string, d time.Duration) error {
	m.note("reboot " + node + " " + d.String())
	return nil
}
func (m *recorded) PowerOff(_ context.Context, node string) error {
	m.note("poweroff " + node)
	return nil
}
func (m *recorded) DeleteMachine(_ context.Context, node string) error {
	m.note("delete " + node)
	return nil
}
func (m *recorded) StartReplacement(_ context.Context, node string) (string, error) {
	m.note("start " + node)
	return "boot-2", nil
}
func (m *recorded) WaitRegistered(ctx context.Context, node string) error {
	if m.release != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.release:
		}
	}
	m.note("registered " + node)
	return nil
}

func requestsMap(t *testing.T, rs map[string]Request) *v1.ConfigMap {
	t.Helper()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RequestsConfigMapName, Namespace: ConfigMapNamespace}, Data: map[string]string{}}
	for n, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[n] = string(b)
	}
	return cm
}

// writeRequests writes the requests ConfigMap and returns it as stored.
func writeRequests(ctx context.Context, t *testing.T, client kubernetes.Interface, cm *v1.ConfigMap) *v1.ConfigMap {
	t.Helper()
	cms := client.CoreV1().ConfigMaps(ConfigMapNamespace)
	if _, err := cms.Get(ctx, RequestsConfigMapName, metav1.GetOptions{}); err == nil {
		out, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readRequests(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string]Request {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Request{}
	for n, s := range cm.Data {
		r, err := ParseRequest(s)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = r
	}
	return out
}

// Each request is carried out once by ID, whoever sees it again (a resync,
// the same request written again after a lost answer, a restarted
// process), and marked done; a new ID is a new request; other processes'
// machines, done requests and unreadable ones are left alone.
func TestCarrierOncePerRequestID(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	ms := &recorded{mine: map[string]bool{"a": true, "b": true, "c": true}}
	c := NewCarrier(CarrierOptions{Client: client, RebootDowntime: 7 * time.Second}, ms)
	earlier := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cm := writeRequests(ctx, t, client, requestsMap(t, map[string]Request{
		"a":     {ID: "r1", Action: ActionReboot},
		"b":     {ID: "r2", Action: ActionPowerOff},
		"c":     {ID: "r0", Action: ActionReboot, Done: &earlier},
		"other": {ID: "r3", Action: ActionReboot},
	}))
	cm.Data["bad"] = `{"id":"x","action":"explode"}`
	ms.mine["bad"] = true
	c.OnRequests(ctx, cm)
	c.OnRequests(ctx, cm) // a resync: the same requests
	if want := []string{"poweroff b", "reboot a 7s"}; !slices.Equal(sortedCopy(ms.got()), want) {
		t.Fatalf("carried out %q, want %q", ms.got(), want)
	}
	got := readRequests(ctx, t, client)
	for _, n := range []string{"a", "b"} {
		if got[n].Done == nil {
			t.Errorf("request of %s not marked done: %+v", n, got[n])
		}
	}
	if got["other"].Done != nil || !got["c"].Done.Equal(earlier) {
		t.Errorf("requests not this carrier's to mark: other %+v, c %+v", got["other"], got["c"])
	}

	// Seen again once done, by this carrier or a restarted one: nothing.
	cm, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.OnRequests(ctx, cm)
	NewCarrier(CarrierOptions{Client: client}, ms).OnRequests(ctx, cm)
	if n := len(ms.got()); n != 2 {
		t.Fatalf("a done request carried out again: %q", ms.got())
	}

	// A new request (a new ID) for the same machine is carried out.
	b, _ := json.Marshal(Request{ID: "r4", Action: ActionReboot})
	cm.Data["a"] = string(b)
	cm = writeRequests(ctx, t, client, cm)
	c.OnRequests(ctx, cm)
	if calls := ms.got(); len(calls) != 3 || calls[2] != "reboot a 7s" {
		t.Fatalf("a new request not carried out: %q", calls)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A request marked done only if it is still the node's: one replaced by a
// newer request meanwhile keeps the newer one, not done.
func TestCarrierMarksOnlyItsOwnRequest(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	c := NewCarrier(CarrierOptions{Client: client}, &recorded{})
	writeRequests(ctx, t, client, requestsMap(t, map[string]Request{"a": {ID: "new", Action: ActionReboot}}))
	c.markDone(ctx, "a", Request{ID: "old", Action: ActionReboot})
	if r := readRequests(ctx, t, client)["a"]; r.ID != "new" || r.Done != nil {
		t.Errorf("marking an older request done changed the node's: %+v", r)
	}
}

// With IgnorePowerOff a power-off is marked done and the machine is left
// alone; reboots still happen.
func TestCarrierIgnorePowerOff(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	ms := &recorded{mine: map[string]bool{"a": true}}
	c := NewCarrier(CarrierOptions{Client: client, IgnorePowerOff: true}, ms)
	c.OnRequests(ctx, writeRequests(ctx, t, client, requestsMap(t, map[string]Request{"a": {ID: "p", Action: ActionPowerOff}})))
	if calls := ms.got(); len(calls) != 0 {
		t.Errorf("an ignored power-off reached the machine: %q", calls)
	}
	if r := readRequests(ctx, t, client)["a"]; r.Done == nil {
		t.Errorf("an ignored power-off is not marked done: %+v", r)
	}
}

// A replacement deletes the machine, then the Node, its Lease and its pods;
// after the downtime the new machine starts, and the request is done only
// once the new machine has registered its Node. A replacement cut short
// (the process stops) is not marked done: a restarted process carries it
// out.
func TestCarrierReplace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "old"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: v1.NamespaceNodeLease}},
		&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: v1.PodSpec{NodeName: "a"}},
	)
	ms := &recorded{mine: map[string]bool{"a": true, "b": true}, release: make(chan struct{})}
	c := NewCarrier(CarrierOptions{Client: client, ReplaceDowntime: time.Millisecond}, ms)
	c.OnRequests(ctx, writeRequests(ctx, t, client, requestsMap(t, map[string]Request{"a": {ID: "r", Action: ActionReplace}})))

	// Started, waiting for the registration.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(ms.got()) == 2, nil
	}); err != nil {
		t.Fatalf("the replacement did not start: %q", ms.got())
	}
	if want := []string{"delete a", "start a"}; !slices.Equal(ms.got(), want) {
		t.Errorf("calls %q, want %q", ms.got(), want)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{}); err == nil {
		t.Error("the replaced machine's Node is still there")
	}
	if _, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "a", metav1.GetOptions{}); err == nil {
		t.Error("the replaced machine's Lease is still there")
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{}); err == nil {
		t.Error("the replaced machine's pod is still there")
	}
	if r := readRequests(ctx, t, client)["a"]; r.Done != nil {
		t.Fatalf("replacement marked done before the new machine registered: %+v", r)
	}
	close(ms.release)
	c.Wait()
	if r := readRequests(ctx, t, client)["a"]; r.Done == nil {
		t.Errorf("replacement not marked done once registered: %+v", r)
	}

	// Cut short: the context ends while the new machine has not registered.
	ms.release = make(chan struct{})
	short, stop := context.WithCancel(ctx)
	c.OnRequests(short, writeRequests(ctx, t, client, requestsMap(t, map[string]Request{"b": {ID: "s", Action: ActionReplace}})))
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return slices.Contains(ms.got(), "start b"), nil
	}); err != nil {
		t.Fatalf("the second replacement did not start: %q", ms.got())
	}
	stop()
	c.Wait()
	if r := readRequests(ctx, t, client)["b"]; r.Done != nil {
		t.Errorf("a replacement cut short was marked done: %+v", r)
	}
	if strings.Contains(strings.Join(ms.got(), ","), "registered b") {
		t.Errorf("calls %q", ms.got())
	}
}
