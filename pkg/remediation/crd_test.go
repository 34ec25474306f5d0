package remediation

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

type schemaNode struct {
	Type                 string                `json:"type"`
	Properties           map[string]schemaNode `json:"properties"`
	Items                *schemaNode           `json:"items"`
	AdditionalProperties *schemaNode           `json:"additionalProperties"`
	IntOrString          bool                  `json:"x-kubernetes-int-or-string"`
	Required             []string              `json:"required"`
}

// TestCRDSchemaMatchesTypes: every field of the Go types is in crd.yaml's
// schema with a matching type, and the schema has no field the types lack,
// so the API server stores what the controller reads.
func TestCRDSchemaMatchesTypes(t *testing.T) {
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(CRD, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
		t.Fatalf("versions %+v", crd.Spec.Versions)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	compare(t, "spec", reflect.TypeOf(PolicySpec{}), root.Properties["spec"])
	compare(t, "status", reflect.TypeOf(PolicyStatus{}), root.Properties["status"])
}

var (
	durationType = reflect.TypeOf(metav1.Duration{})
	timeType     = reflect.TypeOf(metav1.Time{})
	intstrType   = reflect.TypeOf(intstr.IntOrString{})
	selectorType = reflect.TypeOf(metav1.LabelSelector{})
)

func compare(t *testing.T, path string, typ reflect.Type, s schemaNode) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == durationType, typ == timeType, typ.Kind() == reflect.String:
		want = "string"
	case typ == intstrType:
		if !s.IntOrString {
			t.Errorf("%s: want x-kubernetes-int-or-string", path)
		}
		return
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		want = "integer"
	case typ.Kind() == reflect.Slice:
		want = "array"
	case typ.Kind() == reflect.Struct, typ.Kind() == reflect.Map:
		want = "object"
	}
	if s.Type != want {
		t.Errorf("%s: schema type %q, Go type %s wants %q", path, s.Type, typ, want)
		return
	}
	switch {
	case typ.Kind() == reflect.Slice:
		if s.Items == nil {
			t.Errorf("%s: no items", path)
			return
		}
		compare(t, path+"[]", typ.Elem(), *s.Items)
	case typ.Kind() == reflect.Struct && typ != durationType && typ != timeType && typ != selectorType:
		fields := map[string]reflect.Type{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
		}
		var names []string
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ps, ok := s.Properties[n]
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the schema", path, n)
				continue
			}
			compare(t, path+"."+n, fields[n], ps)
		}
		for n := range s.Properties {
			if _, ok := fields[n]; !ok {
				t.Errorf("%s.%s: in the schema, not in the Go type", path, n)
			}
		}
	}
}
