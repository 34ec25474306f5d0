package companion

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzLastWriter feeds managedFields as the API server could return them
// (any FieldsV1 bytes, any manager name) and any field path: reading the
// last writer never panics, and a writer is only named for a path that the
// entry's fields really hold.
func FuzzLastWriter(f *testing.F) {
	f.Add(`{"f:spec":{"f:taints":{}}}`, "kube-controller-manager", "f:spec/f:taints")
	f.Add(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:status":{}}}}}`, "kube-controller-manager", `f:status/f:conditions/k:{"type":"Ready"}/f:status`)
	f.Add(`{"f:spec":{"f:podCIDR":{}}}`, "x-kube-controller-manager", "f:spec/f:podCIDR")
	f.Add(`not json`, "", `k:{"type":"Ready"}`)
	f.Add(`{"f:spec":[1,2]}`, "m", "f:spec/f:taints")
	f.Fuzz(func(t *testing.T, raw, manager, path string) {
		field := Path(strings.Split(path, "/"))
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(raw)}}}}
		got, ok := LastWriter(n, field)
		_ = field.String() // evidence names the field in events and errors
		_ = WrittenBy(got, "kube-controller-manager")
		if !ok {
			return
		}
		if got != manager {
			t.Fatalf("LastWriter named %q, the only entry is %q's", got, manager)
		}
		var set map[string]any
		if err := json.Unmarshal([]byte(raw), &set); err != nil {
			t.Fatalf("a writer named from fields that are not JSON: %v", err)
		}
		for _, k := range field {
			next, isMap := set[k].(map[string]any)
			if !isMap {
				t.Fatalf("writer named for %v, which the fields do not hold (at %q)", field, k)
			}
			set = next
		}
	})
}
