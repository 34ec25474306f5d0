package remediation

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// crdResource is where CustomResourceDefinitions live.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CRD (one already there is kept) and waits up to
// timeout until the policies' resource is served: Established, and a list
// answers, since discovery may lag the condition. simulate, the chaos runs
// and the tests install it so; a cluster gets it from deploy/ or the chart.
func InstallCRD(ctx context.Context, dyn dynamic.Interface, fieldManager string, timeout time.Duration) error {
	data, err := utilyaml.ToJSON(CRD)
	if err != nil {
		return fmt.Errorf("the RemediationPolicy CRD: %w", err)
	}
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON(data); err != nil {
		return fmt.Errorf("the RemediationPolicy CRD: %w", err)
	}
	crds := dyn.Resource(crdResource)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the RemediationPolicy CRD: %w", err)
	}
	status := "not created yet"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			status = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			established = established || m["type"] == "Established" && m["status"] == "True"
		}
		if !established {
			status = "not Established"
			return false, nil
		}
		if _, err := dyn.Resource(GroupVersionResource).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			status = "Established, not served: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the RemediationPolicy CRD was not served within %v (%s): %w", timeout, status, err)
	}
	return nil
}
