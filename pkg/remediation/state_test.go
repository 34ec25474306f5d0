package remediation

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStateRoundTrip(t *testing.T) {
	st := State{Step: 2, StepSince: t0.Add(123 * time.Nanosecond), RepairSince: t0.Add(-time.Hour), BootID: "b"}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationState: EncodeState("gpu", ActionReboot, st)}}}
	got, err := ReadState(n, "gpu", 5)
	st.Action, st.Key = ActionReboot, "3/Reboot" // the record names the step's action and identity
	if err != nil || got != st {
		t.Fatalf("%+v, %v; want %+v", got, err, st)
	}
	if got, err := ReadState(n, "general", 5); err != nil || got != NotInRepair {
		t.Errorf("another policy's state: %+v, %v", got, err)
	}
	if _, err := ReadState(n, "gpu", 2); err == nil {
		t.Error("a step beyond the policy's ladder was accepted")
	}
	for _, bad := range []string{`{`, `{"step":1}`, `{"policy":"gpu","step":-1}`, `{"policy":"gpu","step":0}`,
		`{"policy":"gpu","step":0,"stepSince":"2026-11-28T09:00:00Z","repairSince":"2026-11-28T10:00:00Z"}`} {
		n.Annotations[AnnotationState] = bad
		if _, err := ReadState(n, "gpu", 5); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzReadState(f *testing.F) {
	f.Add(EncodeState("gpu", ActionDrain, State{Step: 1, StepSince: t0, RepairSince: t0}))
	f.Add(`{"policy":"gpu","step":7}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationState: s}}}
		st, err := ReadState(n, "gpu", 5)
		if err != nil || st == NotInRepair {
			return
		}
		if st.Step < 0 || st.Step >= 5 || st.StepSince.Before(st.RepairSince) {
			t.Fatalf("%q read as %+v", s, st)
		}
		again, err := ReadState(&v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationState: EncodeState("gpu", ActionDrain, st)}}}, "gpu", 5)
		if err != nil || !again.StepSince.Equal(st.StepSince) || again.Step != st.Step {
			t.Fatalf("re-encoded %+v: %+v, %v", st, again, err)
		}
	})
}

func TestRequestOf(t *testing.T) {
	st := State{Step: 1, StepSince: t0, RepairSince: t0.Add(-time.Minute), BootID: "b", Drain: true, FenceBootID: "b"}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationState: EncodeState("gpu", ActionFence, st)}}}
	r, ok, err := RequestOf(n)
	if err != nil || !ok || !r.Drain || r.FenceBootID != "b" || r.Policy != "gpu" || r.Step != 1 || !r.Since.Equal(t0) {
		t.Fatalf("%+v %v %v", r, ok, err)
	}
	if want := "remediation policy gpu, step 2 (Fence)"; r.Why() != want {
		t.Errorf("Why() = %q, want %q", r.Why(), want)
	}
	st.Action, st.Key = ActionFence, "2/Fence"
	if got, err := ReadState(n, "gpu", 3); err != nil || got != st {
		t.Errorf("ReadState: %+v %v; want %+v", got, err, st)
	}
	n.Annotations[AnnotationState] = `{"policy":"gpu"`
	if _, ok, err := RequestOf(n); ok || err == nil {
		t.Errorf("malformed record: ok %v, err %v", ok, err)
	}
	delete(n.Annotations, AnnotationState)
	if _, ok, err := RequestOf(n); ok || err != nil {
		t.Errorf("no record: ok %v, err %v", ok, err)
	}
}

// A record names its step's identity; one without (written before keys)
// reads as its number and action. ReadRecord keeps a step beyond the
// ladder, for Place to settle.
func TestRecordKey(t *testing.T) {
	st := State{Step: 1, Key: "1/Taint/k=:NoSchedule", StepSince: t0, RepairSince: t0}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationState: EncodeState("gpu", ActionTaint, st)}}}
	got, err := ReadRecord(n, "gpu")
	if err != nil || got.Key != st.Key || got.Action != ActionTaint || got.Step != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	n.Annotations[AnnotationState] = `{"policy":"gpu","step":7,"action":"Reboot","stepSince":"2026-11-28T10:00:00Z","repairSince":"2026-11-28T10:00:00Z"}`
	if got, err := ReadRecord(n, "gpu"); err != nil || got.Step != 7 || got.Key != "8/Reboot" {
		t.Errorf("an old record beyond the ladder: %+v %v", got, err)
	}
	if _, err := ReadState(n, "gpu", 5); err == nil {
		t.Error("ReadState accepted a step beyond the ladder")
	}
}
