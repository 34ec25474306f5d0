package fake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
)

func TestRepairRequestWrittenOnceAndRefusedForGoneMachines(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ConfigMapNamespace},
		Data: map[string]string{"gone": Deleted, "off": Shutdown}})
	p := New(client)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u"}}
	if err := p.Reboot(ctx, n, "u/b/reboot", nscloud.NoPremise); err != nil {
		t.Fatal(err)
	}
	read := func() Request {
		cm, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseRequest(cm.Data["n"])
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(); r.ID != "u/b/reboot" || r.Action != ActionReboot || r.Done != nil {
		t.Errorf("request %+v", r)
	}
	// fakenodes marks it done; the same request again leaves it done.
	cm, _ := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
	cm.Data["n"] = `{"id":"u/b/reboot","action":"reboot","done":"2026-11-28T10:00:00Z"}`
	if _, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Reboot(ctx, n, "u/b/reboot", nscloud.NoPremise); err != nil {
		t.Fatal(err)
	}
	if r := read(); r.Done == nil || !r.Done.Equal(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("the request sent again was written again: %+v", r)
	}
	// Sent again once it has shut the machine down (the answer lost, and
	// fakenodes quick): accepted as it was, not refused for the state it
	// caused (TestFakeCloudRebootAndReplace's race on a busy machine).
	off := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ConfigMapNamespace}, Data: map[string]string{"gone": Deleted, "off": Shutdown, "n": Shutdown}}
	if _, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Update(ctx, off, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Reboot(ctx, n, "u/b/reboot", nscloud.NoPremise); err != nil {
		t.Errorf("the same reboot sent again while its machine is off: %v", err)
	}
	if err := p.Reboot(ctx, n, "u/b2/reboot", nscloud.NoPremise); !errors.As(err, new(*nscloud.RefusedError)) {
		t.Errorf("a new reboot of a machine that is off: %v, want a refusal", err)
	}
	off.Data["n"] = Running
	if _, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Update(ctx, off, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Replace(ctx, n, "u/b/replace", nscloud.NoPremise); err != nil || read().Action != ActionReplace {
		t.Errorf("a new request: %v, %+v", err, read())
	}
	var refused *nscloud.RefusedError
	for _, name := range []string{"gone", "off"} {
		if err := p.Reboot(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, "x/y/reboot", nscloud.NoPremise); !errors.As(err, &refused) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	if err := p.Reboot(ctx, n, "", nscloud.NoPremise); err == nil {
		t.Error("a request without an ID was written")
	}
	// PowerOff: written like the others, once per ID; a machine already
	// off or gone needs nothing (accepted, nothing written).
	if err := p.PowerOff(ctx, n, "u/b/gpu/2/Fence", nscloud.NoPremise); err != nil || read().Action != ActionPowerOff || read().ID != "u/b/gpu/2/Fence" {
		t.Errorf("power-off: %v, %+v", err, read())
	}
	for _, name := range []string{"gone", "off"} {
		if err := p.PowerOff(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, "x/y/Fence", nscloud.NoPremise); err != nil {
			t.Errorf("power-off of %s: %v, want accepted", name, err)
		}
		cm, _ := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
		if _, ok := cm.Data[name]; ok {
			t.Errorf("power-off of %s written: %v", name, cm.Data)
		}
	}
	if _, _, ok := nscloud.FencerOf(p); !ok {
		t.Error("the fake provider cannot fence")
	}
}

// Chaos seed 170030: a Reboot decided on the answer that the machine was
// off reached the provider after a person had started the machine again.
// A request whose premise is that the machine is off is refused when it
// runs, and nothing is written for fakenodes to carry out.
func TestRepairRequestRefusedWhenItsPremiseEnded(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ConfigMapNamespace},
		Data: map[string]string{"off": Shutdown}})
	p := New(client)
	var refused *nscloud.RefusedError
	for _, name := range []string{"started", "off"} {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u"}}
		for _, call := range []func(context.Context, *v1.Node, string, nscloud.Premise) error{p.Reboot, p.Replace} {
			if err := call(ctx, n, "u/b/x", nscloud.PremiseMachineOff); !errors.As(err, &refused) {
				t.Errorf("%s: %v, want a refusal", name, err)
			}
		}
	}
	started := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "started", UID: "u"}}
	if err := p.PowerOff(ctx, started, "u/b/Fence", nscloud.PremiseMachineOff); !errors.As(err, &refused) || !strings.Contains(err.Error(), "machine runs") {
		t.Errorf("power-off of a machine that runs again: %v, want a refusal", err)
	}
	if err := p.PowerOff(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "off"}}, "u/b/Fence", nscloud.PremiseMachineOff); err != nil {
		t.Errorf("power-off of a machine still off: %v, want accepted", err)
	}
	if cm, err := client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, RequestsConfigMapName, metav1.GetOptions{}); err == nil && len(cm.Data) > 0 {
		t.Errorf("requests written: %v", cm.Data)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"id":"a","action":"reboot"}`, `{"id":"a","action":"poweroff"}`, `{"id":"a","action":"replace","done":"2026-11-28T10:00:00Z"}`, `{}`, `x`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequest(s)
		if err == nil && (r.ID == "" || (r.Action != ActionReboot && r.Action != ActionReplace && r.Action != ActionPowerOff)) {
			t.Fatalf("accepted %q as %+v", s, r)
		}
	})
}
