package fake

import (
	"context"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPublishTouchesOnlyItsKeys: Publish creates the ConfigMap when there
// is none, writes the states it is given, deletes the key of a machine
// that runs, leaves other publishers' keys, and the provider answers from
// what it wrote.
func TestPublishTouchesOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	read := func() map[string]string {
		cm, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	if err := Publish(ctx, client, map[string]string{"a": Shutdown, "b": Running}); err != nil {
		t.Fatal(err)
	}
	if got, want := read(), map[string]string{"a": Shutdown}; !maps.Equal(got, want) {
		t.Errorf("after the first publish: %v, want %v", got, want)
	}
	// Another process's machine, then this one's again.
	if err := Publish(ctx, client, map[string]string{"other": Deleted}); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, client, map[string]string{"a": Running, "b": Deleted}); err != nil {
		t.Fatal(err)
	}
	if got, want := read(), map[string]string{"b": Deleted, "other": Deleted}; !maps.Equal(got, want) {
		t.Errorf("after the second publish: %v, want %v", got, want)
	}
	p := New(client)
	for name, want := range map[string][2]bool{"a": {true, false}, "b": {false, false}} {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		exists, err1 := p.InstanceExists(ctx, node)
		shutdown, err2 := p.InstanceShutdown(ctx, node)
		if err1 != nil || err2 != nil || exists != want[0] || shutdown != want[1] {
			t.Errorf("%s: exists %v shutdown %v (%v, %v), want %v", name, exists, shutdown, err1, err2, want)
		}
	}
}
