package explain

import (
	"context"
	"errors"
	"io"

	"k8s.io/client-go/kubernetes"
)

// NodeOptions are the settings a node is judged against (nodeshepherd's
// configuration, or its defaults).
type NodeOptions struct{}

// NodeExplanation is what nodeshepherd sees about one node.
type NodeExplanation struct {
	Name string `json:"name"`
}

// Node explains the node called name.
func Node(ctx context.Context, cs kubernetes.Interface, name string, o NodeOptions) (*NodeExplanation, error) {
	return nil, errors.New("explain node: not implemented yet")
}

// WriteTable prints the explanation for people.
func (e *NodeExplanation) WriteTable(w io.Writer) error { return nil }
