package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CreateObjects creates the objects of docs (YAML documents, as a
// controller's descriptor gives its CRD and its tests' work) with cfg's
// credentials: the CustomResourceDefinitions first, each waited for until
// Established, then the others, namespaced ones in namespace unless they
// name theirs. An object that exists already is left as it is.
func CreateObjects(t testing.TB, cfg *rest.Config, namespace string, docs ...[]byte) {
	t.Helper()
	var crds, objs []*unstructured.Unstructured
	for _, doc := range docs {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("objects to create: %v\n%s", err, doc)
			}
			switch {
			case len(obj.Object) == 0:
			case obj.GetKind() == "CustomResourceDefinition":
				crds = append(crds, obj)
			default:
				objs = append(objs, obj)
			}
		}
	}
	if len(crds)+len(objs) == 0 {
		return
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := Context(t)
	for _, crd := range crds {
		if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating CustomResourceDefinition %s: %v", crd.GetName(), err)
		}
		Eventually(t, time.Minute, "CustomResourceDefinition "+crd.GetName()+" Established", func(ctx context.Context) (bool, string, error) {
			got, err := dyn.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("conditions %v", conds), nil
		})
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		var mapping *meta.RESTMapping
		// Discovery serves a new CRD's kind a little after it is Established.
		Eventually(t, time.Minute, "the API of "+gvk.String(), func(context.Context) (bool, string, error) {
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				mapper.Reset()
				return false, err.Error(), nil
			}
			mapping = m
			return err == nil, "", err
		})
		r := dyn.Resource(mapping.Resource)
		var ri dynamic.ResourceInterface = r
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			ri = r.Namespace(obj.GetNamespace())
		}
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
}
