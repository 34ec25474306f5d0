package outofservice

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// written is a managedFields entry of manager, at, owning the fields of
// fieldsJSON.
func written(manager string, at time.Time, fieldsJSON string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fieldsJSON)}
}

// byPerson is the entry `kubectl annotate` leaves: the confirmation alone.
func byPerson(at time.Time) metav1.ManagedFieldsEntry {
	return written("kubectl-annotate", at, `{"f:metadata":{"f:annotations":{".":{},"f:nodeshepherd.io/out-of-service":{}}}}`)
}

// confirmed is a node silent since silent (boot b2), confirmed by a person
// without a recorded boot, with the given managedFields.
func confirmed(silent time.Time, fields ...metav1.ManagedFieldsEntry) *v1.Node {
	n := node("n1", false, silent, "b2", map[string]string{AnnotationConfirm: "psu dead"})
	n.UID = "uid-1"
	n.ManagedFields = append([]metav1.ManagedFieldsEntry{
		written("kubelet", silent.Add(-time.Hour), `{"f:status":{"f:nodeInfo":{"f:bootID":{}}}}`)}, fields...)
	return n
}

// Issue 45 (4e): a person's confirmation without a recorded boot counts
// only if it was written during the current boot.
func TestBindConfirmation(t *testing.T) {
	silent := t0.Add(-10 * time.Minute)
	for _, tc := range []struct {
		name string
		n    *v1.Node
		seen *sighting // this process saw the node without it
		ok   bool
		has  string
	}{
		{"seen without it on this boot", confirmed(silent), &sighting{uid: "uid-1", boot: "b2"}, true, `added while the node reported boot ID "b2"`},
		{"seen without it on the previous boot", confirmed(silent), &sighting{uid: "uid-1", boot: "b1"}, false, "no managedFields entry owns it"},
		{"seen without it, another Node of the name", confirmed(silent), &sighting{uid: "uid-0", boot: "b2"}, false, ""},
		{"written after the silence began", confirmed(silent, byPerson(silent.Add(2*time.Second))), nil, true, "after the node went silent"},
		{"written a second after", confirmed(silent, byPerson(silent.Add(time.Second))), nil, true, "field manager kubectl-annotate"},
		{"written in the second the silence began", confirmed(silent.Add(300*time.Millisecond), byPerson(silent.Add(900*time.Millisecond))), nil, false, "not after the node went silent"},
		{"written before the silence: perhaps another boot", confirmed(silent, byPerson(silent.Add(-time.Hour))), nil, false, "may have booted again"},
		{"written by a manager that wrote other fields", confirmed(silent, written("kubectl-edit", silent.Add(time.Minute),
			`{"f:metadata":{"f:annotations":{"f:nodeshepherd.io/out-of-service":{}},"f:labels":{"f:a":{}}}}`)), nil, false, "has written other fields"},
		{"written with other annotations", confirmed(silent, written("kubectl-annotate", silent.Add(time.Minute),
			`{"f:metadata":{"f:annotations":{"f:nodeshepherd.io/out-of-service":{},"f:note":{}}}}`)), nil, false, "has written other fields"},
		{"written with its boot annotation: fine", confirmed(silent, written("kubectl-annotate", silent.Add(time.Minute),
			`{"f:metadata":{"f:annotations":{"f:nodeshepherd.io/out-of-service":{},"f:nodeshepherd.io/out-of-service-confirmation-boot-id":{}}}}`)), nil, true, ""},
		{"owned by two managers", confirmed(silent, byPerson(silent.Add(time.Minute)), written("tool", silent.Add(time.Minute),
			`{"f:metadata":{"f:annotations":{"f:nodeshepherd.io/out-of-service":{}}}}`)), nil, false, "all own it"},
		{"no managedFields", confirmed(silent), nil, false, "no managedFields entry owns it"},
		{"an entry without a time", func() *v1.Node {
			n := confirmed(silent, byPerson(silent.Add(time.Minute)))
			n.ManagedFields[1].Time = nil
			return n
		}(), nil, false, "has no time"},
		{"Ready: when the boot began is unknown", func() *v1.Node {
			n := confirmed(silent, byPerson(silent.Add(time.Minute)))
			n.Status.Conditions[0].Status = v1.ConditionTrue
			return n
		}(), nil, false, "not silent (Ready True)"},
		{"NotReady posted by a kubelet: unknown too", func() *v1.Node {
			n := confirmed(silent, byPerson(silent.Add(time.Minute)))
			n.Status.Conditions[0].Status = v1.ConditionFalse
			return n
		}(), nil, false, "not silent (Ready False)"},
		{"no boot ID", func() *v1.Node {
			n := confirmed(silent, byPerson(silent.Add(time.Minute)))
			n.Status.NodeInfo.BootID = ""
			return n
		}(), nil, false, "no boot ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testConfig(), false)
			if tc.seen != nil {
				f.c.unconfirmed["n1"] = *tc.seen
			}
			b := f.c.bindConfirmation(tc.n)
			if b.ok != tc.ok || !strings.Contains(b.how, tc.has) {
				t.Errorf("got %v (%s), want %v with %q", b.ok, b.how, tc.ok, tc.has)
			}
		})
	}
}

// observe keeps the boot of a node seen without a confirmation, and not
// of one seen with it.
func TestObserveUnconfirmed(t *testing.T) {
	f := newFixture(t, testConfig(), false)
	n := node("n1", true, t0, "b1", nil)
	f.c.observe(n)
	f.c.observe(node("n1", true, t0, "b2", map[string]string{AnnotationConfirm: "x"}))
	if got := f.c.unconfirmed["n1"]; got.boot != "b1" {
		t.Fatalf("sighting %+v, want boot b1 (seen without the confirmation)", got)
	}
	f.c.forget("n1")
	if _, ok := f.c.unconfirmed["n1"]; ok {
		t.Fatal("sighting kept after the node is gone")
	}
}

// Issue 45 (4e), the controller: a confirmation written before the silence
// of the current boot (the controller did not run meanwhile) is neither
// recorded nor acted upon, and said once; one written after the silence
// began is recorded for the current boot and taints.
func TestConfirmationOfAnUnknownBootIsNotCounted(t *testing.T) {
	silent := t0.Add(-time.Hour)
	early := confirmed(silent, byPerson(silent.Add(-time.Minute)))
	late := confirmed(silent, byPerson(silent.Add(time.Minute)))
	late.Name, late.UID = "n2", "uid-2"
	cfg := testConfig()
	cfg.MaxNodes = 2
	f := newFixture(t, cfg, false, early, late)
	for range 3 {
		f.sync("n1")
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes %v for a confirmation of an unknown boot", w)
	}
	ev := f.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventBlocked) || !strings.Contains(ev[0], "was written during the node's current boot") ||
		!strings.Contains(ev[0], "not after the node went silent") {
		t.Fatalf("events %v, want one warning saying why", ev)
	}
	if got := value(f.c.metrics.refusals.WithLabelValues(codeUnbound)); got != 1 {
		t.Errorf("refusals{%s} = %v", codeUnbound, got)
	}

	f.sync("n2")
	n := f.apiNode("n2")
	if n.Annotations[AnnotationConfirmationBootID] != "b2" {
		t.Fatalf("annotations %v, want the confirmation recorded for boot b2", n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventConfirmationRecorded) || !strings.Contains(ev[0], "after the node went silent") {
		t.Fatalf("events %v", ev)
	}
	f.put(n)
	f.sync("n2")
	if !tainted(f.apiNode("n2")) {
		t.Fatal("not tainted on a confirmation of its boot")
	}
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes n2", "update nodes n2"}) {
		t.Fatalf("writes %v", w)
	}
}
