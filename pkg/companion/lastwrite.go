package companion

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LastWrite returns the field manager that last wrote the field of obj and
// when that manager last wrote the object (zero when managedFields has no
// time), for `nodeshepherd explain` to say who set a taint or a cordon.
func LastWrite(obj metav1.Object, field Path) (manager string, at time.Time, ok bool) {
	e, ok := owner(obj, field)
	if !ok {
		return "", time.Time{}, false
	}
	if e.Time != nil {
		at = e.Time.Time
	}
	return e.Manager, at, true
}
