// Package companion is what lets nodeshepherd run next to controllers it does
// not manage (companion mode, docs/companion.md): on a managed cluster
// kube-controller-manager's node lifecycle, taint eviction and node IPAM, and
// the provider's cloud-controller-manager, cannot be turned off, and two
// writers of the same taints, conditions or pod CIDRs fight. A controller that
// is not a companion (descriptor.Info.Companion) names what it writes that
// another writer writes too (its Claims); before it starts and while it runs,
// nodeshepherd looks for that writer's last writes in the objects'
// managedFields and refuses to run the controller while they show it active,
// unless --allow-conflicting-writers names it.
package companion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Writers: the field managers (managedFields[].manager, the API server's
// name for a client: its user agent up to the first "/") of the controllers
// a managed control plane runs. kube-controller-manager v1.37 writes as
// "kube-controller-manager" for every controller, also with
// --use-service-account-credentials; providers' cloud controller managers
// as "cloud-controller-manager" or "<provider>-cloud-controller-manager";
// kube-scheduler as "kube-scheduler". Each one's leader Lease in
// kube-system bears the same name.
const (
	KubeControllerManager  = "kube-controller-manager"
	CloudControllerManager = "cloud-controller-manager"
	KubeScheduler          = "kube-scheduler"
)

// Path is a field in managedFields' FieldsV1 notation, one key per level:
// {"f:spec", "f:taints"}.
type Path []string

func (p Path) String() string {
	var parts []string
	for _, k := range p {
		k = strings.TrimPrefix(k, "f:")
		if strings.HasPrefix(k, "k:") && len(parts) > 0 {
			parts[len(parts)-1] += "[" + strings.TrimPrefix(k, "k:") + "]"
			continue
		}
		parts = append(parts, k)
	}
	return strings.Join(parts, ".")
}

// Claim is something a controller writes that a writer of a managed control
// plane writes too. Node and Pod return, for an object, the fields that hold
// the claim's values now and what they hold (nil when the object holds none:
// most objects, which are then not decoded further). A field is the
// writer's when its managedFields entry holds the path (or anything under
// it: a condition's key stands for its fields).
type Claim struct {
	// Writer is the field manager that writes the same thing: a manager
	// named Writer or ending in "-"+Writer. Empty: any field manager but
	// nodeshepherd's own (Guarded.Own).
	Writer string
	Node   func(*v1.Node) map[string]Path
	Pod    func(*v1.Pod) map[string]Path
	// Lease, when set, is evidence on its own: the writer's leader Lease
	// kube-system/Lease, held and renewed within its duration, says that
	// it runs and does what the claim is about (read at start, and every
	// leaseRecheck while the controller runs).
	Lease string
	// LiveLease: what the writer wrote counts only while its leader Lease
	// (kube-system/<manager>) is held and renewed within its duration, or
	// when the write is seen being made while the controller runs. For
	// writes that outlive their writer (a pending pod's PodScheduled
	// condition stays as a stopped kube-scheduler left it); without it, a
	// writer without a visible Lease is taken as running and one is taken
	// as stopped only when its Lease was last renewed more than twice its
	// duration ago.
	LiveLease bool
	// Does and Why word the refusal: what the writer does ("writes what
	// it owns") and why two of them are a problem ("Two writers would undo
	// each other's work"); Advice says what to do instead, given the
	// writer's name. Empty, nil: the words for a controller manager's
	// controller.
	Does, Why string
	Advice    func(writer string) string
}

// writtenBy says whether a field manager's name is writer's.
func writtenBy(manager, writer string) bool {
	return manager == writer || strings.HasSuffix(manager, "-"+writer)
}

// matches says whether a field manager is the claim's writer; own is
// nodeshepherd's field manager.
func (c *Claim) matches(manager, own string) bool {
	if c.Writer == "" {
		return manager != "" && manager != own
	}
	return writtenBy(manager, c.Writer)
}

// FieldManager is the field manager the API server records for a client
// with this configuration: its user agent (client-go's default when it
// sets none) up to the first "/".
func FieldManager(cfg *rest.Config) string {
	ua := rest.DefaultKubernetesUserAgent()
	if cfg != nil && cfg.UserAgent != "" {
		ua = cfg.UserAgent
	}
	return strings.SplitN(ua, "/", 2)[0]
}

// Node lifecycle's taints: the NoExecute ones of not-ready and unreachable
// nodes, and the NoSchedule ones it sets by condition.
var nodeLifecycleTaints = []string{v1.TaintNodeNotReady, v1.TaintNodeUnreachable, v1.TaintNodeUnschedulable, v1.TaintNodeMemoryPressure,
	v1.TaintNodeDiskPressure, v1.TaintNodePIDPressure, v1.TaintNodeNetworkUnavailable}

var taintsPath = Path{"f:spec", "f:taints"}

// taintClaim holds the node's taint list (atomic in managedFields: its last
// writer owns all of it) when the list has one of keys.
func taintClaim(writer string, keys ...string) Claim {
	return Claim{Writer: writer, Node: func(n *v1.Node) map[string]Path {
		var held []string
		for _, t := range n.Spec.Taints {
			if slices.Contains(keys, t.Key) {
				held = append(held, t.Key+":"+string(t.Effect))
			}
		}
		if len(held) == 0 {
			return nil
		}
		return map[string]Path{"taints " + strings.Join(held, ", "): taintsPath}
	}}
}

func conditionPath(typ, field string) Path {
	return Path{"f:status", "f:conditions", `k:{"type":"` + typ + `"}`, "f:" + field}
}

// NodeLifecycle is what kube-controller-manager's nodelifecycle controller
// writes: the taints above, and nodes' Ready condition (Unknown when a node
// falls silent).
var NodeLifecycle = []Claim{
	taintClaim(KubeControllerManager, nodeLifecycleTaints...),
	{Writer: KubeControllerManager, Node: func(n *v1.Node) map[string]Path {
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status != v1.ConditionTrue {
				return map[string]Path{"condition Ready=" + string(c.Status): conditionPath(string(v1.NodeReady), "status")}
			}
		}
		return nil
	}},
}

// TaintEviction is what kube-controller-manager's taint-eviction-controller
// writes before it deletes a pod: DisruptionTarget, reason DeletionByTaintManager.
var TaintEviction = []Claim{{Writer: KubeControllerManager, Pod: func(p *v1.Pod) map[string]Path {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Reason == "DeletionByTaintManager" {
			return map[string]Path{"condition DisruptionTarget (DeletionByTaintManager)": conditionPath(string(v1.DisruptionTarget), "reason")}
		}
	}
	return nil
}}}

// NodeIPAM is what kube-controller-manager's nodeipam controller writes:
// nodes' pod CIDRs.
var NodeIPAM = []Claim{{Writer: KubeControllerManager, Node: func(n *v1.Node) map[string]Path {
	if n.Spec.PodCIDR == "" {
		return nil
	}
	return map[string]Path{"podCIDR " + n.Spec.PodCIDR: {"f:spec", "f:podCIDR"}}
}}}

// CloudNodeLifecycle is what a cloud-controller-manager's
// cloud-node-lifecycle controller writes that leaves a trace (node deletions
// leave none): the shutdown taint.
var CloudNodeLifecycle = []Claim{taintClaim(CloudControllerManager, "node.cloudprovider.kubernetes.io/shutdown")}

// Evidence is one field a conflicting writer wrote last, or the leader
// Lease of a writer that runs (Kind "lease").
type Evidence struct {
	Controller string
	Object     runtime.Object // the Node, Pod or Lease, for events
	Kind, Name string         // "node", "fake-node-0000"; pods and leases as namespace/name
	What       string         // what the field holds: "taints node.kubernetes.io/unreachable:NoExecute"; a Lease's holder and renewal
	Field      Path
	Writer     string    // the field manager
	At         time.Time // when that manager last wrote the object
	Writes     string    // the writer's liveness, from its leader Lease

	claim *Claim
	// fresh: seen being written while the controller ran.
	fresh bool
}

func (e Evidence) String() string {
	if e.Kind == "lease" {
		return fmt.Sprintf("its leader Lease %s is %s", e.Name, e.What)
	}
	s := fmt.Sprintf("%s %s: %s (%s) last written by %s", e.Kind, e.Name, e.What, e.Field, e.Writer)
	if !e.At.IsZero() {
		s += " at " + e.At.UTC().Format(time.RFC3339)
	}
	if e.Writes != "" {
		s += "; " + e.Writes
	}
	return s
}

// owner returns the managedFields entry that owns the field, if any.
func owner(obj metav1.Object, field Path) (metav1.ManagedFieldsEntry, bool) {
	for _, e := range obj.GetManagedFields() {
		if holds(e, field) {
			return e, true
		}
	}
	return metav1.ManagedFieldsEntry{}, false
}

// holds says whether the entry's field set has the field (or something
// under it).
func holds(e metav1.ManagedFieldsEntry, field Path) bool {
	if e.FieldsV1 == nil {
		return false
	}
	var set map[string]any
	if json.Unmarshal(e.FieldsV1.GetRawBytes(), &set) != nil {
		return false
	}
	for _, k := range field {
		next, ok := set[k].(map[string]any)
		if !ok {
			return false
		}
		set = next
	}
	return true
}

// holders returns the managedFields entries by the claim's writer that
// hold the field (or something under it); entries of other managers are
// not decoded.
func holders(obj metav1.Object, field Path, c *Claim, own string) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range obj.GetManagedFields() {
		if c.matches(e.Manager, own) && holds(e, field) {
			out = append(out, e)
		}
	}
	return out
}

// check returns the evidence an object holds for the claims; own is
// nodeshepherd's field manager. The same field by the same writer is
// evidence once, whichever claims it is for.
func check(controller, own string, claims []Claim, obj runtime.Object) []Evidence {
	var out []Evidence
	seen := map[string]bool{}
	for i := range claims {
		c := &claims[i]
		var held map[string]Path
		var meta metav1.Object
		var kind, name string
		switch o := obj.(type) {
		case *v1.Node:
			if c.Node != nil {
				held, meta, kind, name = c.Node(o), o, "node", o.Name
			}
		case *v1.Pod:
			if c.Pod != nil {
				held, meta, kind, name = c.Pod(o), o, "pod", o.Namespace+"/"+o.Name
			}
		}
		for _, what := range sortedKeys(held) {
			for _, e := range holders(meta, held[what], c, own) {
				key := what + "\x00" + e.Manager
				if seen[key] {
					continue
				}
				seen[key] = true
				ev := Evidence{Controller: controller, Object: obj, Kind: kind, Name: name, What: what, Field: held[what], Writer: e.Manager, claim: c}
				if e.Time != nil {
					ev.At = e.Time.Time
				}
				out = append(out, ev)
			}
		}
	}
	return out
}

func sortedKeys(m map[string]Path) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// LeaseNamespace holds the leader Leases of kube-controller-manager,
// cloud-controller-manager and kube-scheduler.
const LeaseNamespace = "kube-system"

// active tells whether a writer still runs, from its leader Lease
// (kube-system/<manager name>, or cloud-controller-manager's): a Lease that
// expired means it stopped, and what it wrote then is history. Without a
// Lease to read (no leader election, not visible on this cluster, or not
// readable with this identity), it is taken as running.
func active(ctx context.Context, client kubernetes.Interface, writer string, now time.Time) (bool, string) {
	names := []string{writer}
	if writtenBy(writer, CloudControllerManager) && writer != CloudControllerManager {
		names = append(names, CloudControllerManager)
	}
	var errs []error
	for _, name := range names {
		l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		if l.Spec.RenewTime == nil {
			continue
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		dur := 15 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		age := now.Sub(l.Spec.RenewTime.Time)
		if holder == "" || age > 2*dur {
			return false, fmt.Sprintf("its leader Lease %s/%s was last renewed %v ago, so it no longer runs", LeaseNamespace, name, age.Round(time.Second))
		}
		return true, fmt.Sprintf("its leader Lease %s/%s is held by %s, renewed %v ago", LeaseNamespace, name, holder, max(age, 0).Round(time.Second))
	}
	why := "no leader Lease " + LeaseNamespace + "/" + names[0] + " is visible"
	if len(errs) > 0 {
		why = fmt.Sprintf("its leader Lease %s/%s cannot be read (%v)", LeaseNamespace, names[0], errors.Join(errs...))
	}
	return true, why + ", so it is taken as running"
}

// Settings are companion mode's settings: the controllers to run although
// another writer writes what they own.
type Settings struct {
	AllowConflictingWriters []string
}

// SectionName is the settings' section in the configuration file.
const SectionName = "companion"

// AddFlags registers the settings' flags.
func (s *Settings) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&s.AllowConflictingWriters, "allow-conflicting-writers", s.AllowConflictingWriters,
		"Controllers (or *) to run even though another writer, such as a managed cluster's kube-controller-manager, writes what they own "+
			"(seen in managedFields), or, for the scheduler, a running kube-scheduler serves its --scheduler-name (see docs/companion.md). "+
			"Without it such a controller is refused at start and stopped when the writer appears.")
}

// Allowed says whether the controller may run next to a conflicting writer.
func (s *Settings) Allowed(controller string) bool {
	return slices.Contains(s.AllowConflictingWriters, "*") || slices.Contains(s.AllowConflictingWriters, controller)
}

// Validate checks that every name is a known controller.
func (s *Settings) Validate(known []string) error {
	var errs []error
	for _, n := range s.AllowConflictingWriters {
		if n != "*" && !slices.Contains(known, n) {
			errs = append(errs, fmt.Errorf("unknown controller %q in --allow-conflicting-writers; known controllers: %s (and * for all)", n, strings.Join(known, ", ")))
		}
	}
	return errors.Join(errs...)
}

// LastWriter returns the field manager that last wrote the field of obj.
func LastWriter(obj metav1.Object, field Path) (string, bool) {
	e, ok := owner(obj, field)
	return e.Manager, ok
}

// WrittenBy says whether a field manager is writer (or "<prefix>-writer").
func WrittenBy(manager, writer string) bool { return writtenBy(manager, writer) }

// ConditionPath is the path of a field of a status condition of that type:
// ConditionPath("Ready", "status").
func ConditionPath(typ, field string) Path { return conditionPath(typ, field) }
