package hollownode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KubeletConditions are the node conditions the kubelet itself reports: it
// writes them again at its next status update, so a value patched in
// through the API lasts until then. Conditions of other reporters
// (node-problem-detector's KernelDeadlock, ...) the kubelet keeps as they
// are.
var KubeletConditions = []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}

// FieldManager is the field manager of the condition patches.
const FieldManager = "nodeshepherd-hollownode"

// SetCondition writes a condition on the nodes' status through the API,
// as node-problem-detector does: a strategic merge patch of
// status.conditions (merged by type), with lastTransitionTime kept when
// the status does not change. An empty reason is FaultInjected, or
// FaultCleared for the condition's healthy status (True for Ready, False
// for the others). A reboot of the machine (MachineStart) sets the
// condition back to its healthy status, as node-problem-detector reports
// after a boot.
func (f *Fleet) SetCondition(ctx context.Context, c v1.NodeCondition, names ...string) error {
	return f.setCondition(ctx, c, false, names)
}

// SetLastingCondition is SetCondition for a condition that survives
// reboots of the machine (a hardware fault, a bad disk): MachineStart
// leaves it, but for a machine deleted and started again (a new machine).
func (f *Fleet) SetLastingCondition(ctx context.Context, c v1.NodeCondition, names ...string) error {
	return f.setCondition(ctx, c, true, names)
}

func (f *Fleet) setCondition(ctx context.Context, c v1.NodeCondition, survivesReboot bool, names []string) error {
	ns, err := f.resolve(names)
	if err != nil {
		return err
	}
	if c.Type == "" || c.Status == "" {
		return fmt.Errorf("a condition needs a type and a status, got %q=%q", c.Type, c.Status)
	}
	if c.Reason == "" {
		c.Reason = "FaultInjected"
		if c.Status == HealthyStatus(c.Type) {
			c.Reason = "FaultCleared"
		}
	}
	if c.Message == "" {
		c.Message = fmt.Sprintf("%s=%s set through the API (nodeshepherd, as node-problem-detector does)", c.Type, c.Status)
	}
	var errs []error
	for _, n := range ns {
		n.mu.Lock()
		n.m.setFault(c.Type, c.Status, survivesReboot)
		n.mu.Unlock()
		errs = append(errs, f.patchCondition(ctx, n.name, c))
	}
	return errors.Join(errs...)
}

// HealthyStatus is the status a cleared condition goes back to.
func HealthyStatus(t v1.NodeConditionType) v1.ConditionStatus {
	if t == v1.NodeReady {
		return v1.ConditionTrue
	}
	return v1.ConditionFalse
}

func (f *Fleet) patchCondition(ctx context.Context, name string, c v1.NodeCondition) error {
	node, err := f.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	now := metav1.NewTime(time.Now())
	c.LastHeartbeatTime, c.LastTransitionTime = now, now
	if i := slices.IndexFunc(node.Status.Conditions, func(x v1.NodeCondition) bool { return x.Type == c.Type }); i >= 0 {
		if cur := node.Status.Conditions[i]; cur.Status == c.Status {
			c.LastTransitionTime = cur.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	if _, err := f.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status"); err != nil {
		return fmt.Errorf("node %s: patching condition %s: %w", name, c.Type, err)
	}
	return nil
}
