package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
)

// Repair requests (nscloud.Repairer): the provider writes them into a
// ConfigMap of their own, one key per node, and the process that runs the
// node's machine (`nodeshepherd fakenodes`, hollow nodes: a Carrier)
// carries them out (reboot: the machine is off for a while
// and boots again, with a new boot ID; replace: the machine and its Node go
// and a new machine registers the Node anew, with a new UID; poweroff: the
// machine is shut down and stays off, the Fence step of a remediation
// ladder).
const RequestsConfigMapName = "nodeshepherd-fake-cloud-requests"

// Actions of a Request.
const (
	ActionReboot   = "reboot"
	ActionReplace  = "replace"
	ActionPowerOff = "poweroff"
)

// Request is the last repair request for a node's machine.
type Request struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Done is when fakenodes carried it out; nil until then.
	Done *time.Time `json:"done,omitempty"`
}

// ParseRequest reads one key of the requests ConfigMap.
func ParseRequest(s string) (Request, error) {
	var r Request
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Request{}, fmt.Errorf("repair request %q: %w", s, err)
	}
	if r.ID == "" || (r.Action != ActionReboot && r.Action != ActionReplace && r.Action != ActionPowerOff) {
		return Request{}, fmt.Errorf("repair request %q: want an id and an action of %s, %s or %s", s, ActionReboot, ActionReplace, ActionPowerOff)
	}
	return r, nil
}

var _ nscloud.Repairer = (*Provider)(nil)
var _ nscloud.Fencer = (*Provider)(nil)

// Reboot asks fakenodes to reboot the node's machine.
func (p *Provider) Reboot(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.request(ctx, node, requestID, ActionReboot, premise)
}

// Replace asks fakenodes to replace the node's machine.
func (p *Provider) Replace(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.request(ctx, node, requestID, ActionReplace, premise)
}

// PowerOff asks fakenodes to power the node's machine off for good. A
// machine already shut down or deleted is off: accepted, nothing to do.
func (p *Provider) PowerOff(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.request(ctx, node, requestID, ActionPowerOff, premise)
}

// request writes the node's request, unless it is already there (the same
// ID: the same request, sent again after a lost answer). A deleted or shut
// down machine refuses a reboot or a replace; a running one refuses a
// request whose premise is that it is off (nscloud.PremiseMachineOff).
func (p *Provider) request(ctx context.Context, node *v1.Node, id, action string, premise nscloud.Premise) error {
	if id == "" {
		return fmt.Errorf("%s of node %s: no request ID", action, node.Name)
	}
	// The same request sent again (its answer lost) is accepted as it was,
	// whatever it did to the machine since: a reboot it started has the
	// machine off now, which must not read as a refusal of it.
	cms := p.client.CoreV1().ConfigMaps(ConfigMapNamespace)
	if cm, err := cms.Get(ctx, RequestsConfigMapName, metav1.GetOptions{}); err == nil {
		if prev, err := ParseRequest(cm.Data[node.Name]); err == nil && prev.ID == id {
			return nil
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s of node %s: reading the requests: %w", action, node.Name, err)
	}
	state, err := p.state(ctx, node)
	if err != nil {
		return err
	}
	switch {
	case premise == nscloud.PremiseMachineOff && state == Running:
		// With this premise nothing is ever written (an off machine's
		// reboot or replace is refused below, its power-off is done
		// already), so fakenodes never acts on a machine started after
		// this check.
		return &nscloud.RefusedError{Step: action, Node: node.Name,
			Message: "the machine runs, and the request was decided on its being off"}
	case state != Running && action == ActionPowerOff:
		return nil // off already: what was asked
	case state != Running:
		return &nscloud.RefusedError{Step: action, Node: node.Name, Message: "the machine is " + state}
	}
	// Bound to the version read, so that fakenodes marking the same
	// request done meanwhile is not undone by writing it again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RequestsConfigMapName, Namespace: ConfigMapNamespace}}
			if cm, err = cms.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(v1.Resource("configmaps"), RequestsConfigMapName, err) // read it again
			}
		}
		if err != nil {
			return err
		}
		if prev, err := ParseRequest(cm.Data[node.Name]); err == nil && prev.ID == id {
			return nil
		}
		b, _ := json.Marshal(Request{ID: id, Action: action})
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cm.ResourceVersion},
			"data": map[string]string{node.Name: string(b)}})
		_, err = cms.Patch(ctx, RequestsConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("%s of node %s: writing the request: %w", action, node.Name, err)
	}
	return nil
}
