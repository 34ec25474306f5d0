package fakenodes

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseTaint: any --taint value is refused with an error or is a taint
// the API server accepts (qualified key, label-value value, known effect)
// that prints back to the same taint.
func FuzzParseTaint(f *testing.F) {
	for _, s := range []string{"dedicated=gpu:NoSchedule", "example.com/k:NoExecute", "k=:PreferNoSchedule", "k", "k=v", ":NoSchedule", "k:Nope", "a=b=c:NoSchedule", "k:v:NoSchedule"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		taint, err := ParseTaint(s)
		if err != nil {
			return
		}
		if len(validation.IsQualifiedName(taint.Key)) > 0 || len(validation.IsValidLabelValue(taint.Value)) > 0 {
			t.Fatalf("ParseTaint(%q) accepted %+v", s, taint)
		}
		switch taint.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			t.Fatalf("ParseTaint(%q) accepted effect %q", s, taint.Effect)
		}
		s2 := taint.Key
		if taint.Value != "" {
			s2 += "=" + taint.Value
		}
		again, err := ParseTaint(s2 + ":" + string(taint.Effect))
		if err != nil || again != taint {
			t.Errorf("%q parsed as %+v, printed back as %+v, %v", s, taint, again, err)
		}
	})
}
