package explain

import (
	"context"
	"errors"
	"io"

	"k8s.io/client-go/kubernetes"
)

// PodExplanation is why a pod is Pending: per-node reasons as kube-scheduler
// summarises them, the nominated node and preemption attempts.
type PodExplanation struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Pod explains the pod namespace/name.
func Pod(ctx context.Context, cs kubernetes.Interface, namespace, name string) (*PodExplanation, error) {
	return nil, errors.New("explain pod: not implemented yet")
}

// WriteTable prints the explanation for people.
func (e *PodExplanation) WriteTable(w io.Writer) error { return nil }
