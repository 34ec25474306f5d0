package framework

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// UpdateNode changes a node as its user would: read, changed by mut and
// written, again on a conflict (the fake kubelet and the controllers write
// nodes all the time). The test fails if the write does not succeed.
func UpdateNode(t testing.TB, client kubernetes.Interface, node string, mut func(*v1.Node)) {
	t.Helper()
	ctx := Context(t)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mut(n)
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("updating node %s: %v", node, err)
	}
}
