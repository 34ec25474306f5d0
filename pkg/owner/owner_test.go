package owner

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetRemoveRoundTrip(t *testing.T) {
	n := &v1.Node{}
	since := time.Date(2026, 11, 28, 10, 0, 0, 123, time.UTC)
	taint := v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	Set(n, TaintKey(taint), Record{Controller: "nodelifecycle", Why: "no heartbeat", Since: since, Until: "Ready again"})
	Set(n, Cordon, Record{Controller: "drain", Why: "KernelDeadlock=True", Since: since})
	if got := n.Annotations[Annotation]; !strings.Contains(got, `"node.kubernetes.io/unreachable:NoExecute"`) || !strings.Contains(got, `"cordon"`) {
		t.Fatalf("annotation %s", got)
	}
	r, ok := Of(n, TaintKey(taint))
	if !ok || r.Controller != "nodelifecycle" || !r.Since.Equal(since) {
		t.Errorf("record %+v, %v", r, ok)
	}
	Remove(n, TaintKey(taint))
	if _, ok := Of(n, TaintKey(taint)); ok {
		t.Error("record left after Remove")
	}
	Remove(n, Cordon)
	if _, ok := n.Annotations[Annotation]; ok {
		t.Errorf("empty records leave the annotation: %q", n.Annotations[Annotation])
	}
	Remove(n, Cordon) // none: nothing to do
}

func TestMalformedIsAnErrorAndReplaced(t *testing.T) {
	for _, s := range []string{`{`, `[]`, `{"cordon":{"why":"x"}}`, `{"":{"controller":"drain"}}`} {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: s}}}
		if _, err := Read(n); err == nil || !strings.Contains(err.Error(), Annotation) {
			t.Errorf("%s: error %v, want one naming the annotation", s, err)
		}
		Set(n, Cordon, Record{Controller: "drain"})
		if recs, err := Read(n); err != nil || len(recs) != 1 {
			t.Errorf("%s: after Set: %v, %v", s, recs, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"cordon":{"controller":"drain","why":"x","since":"2026-11-28T10:00:00Z","until":"y"}}`)
	f.Add(`{"a:NoSchedule":{"controller":"c","since":"bad"}}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: s}}}
		Set(n, "fuzz", Record{Controller: "c"})
		if r, ok := Of(n, "fuzz"); !ok || r.Controller != "c" {
			t.Fatalf("Set on %q: %+v, %v", s, r, ok)
		}
		recs, err := Parse(s)
		if err != nil {
			if len(recs) != 0 {
				t.Fatalf("records %v with error %v", recs, err)
			}
			return
		}
		again, err := Parse(Encode(recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded %v: %v, %v", recs, again, err)
		}
	})
}
