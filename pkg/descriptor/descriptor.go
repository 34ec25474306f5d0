// Package descriptor is what a controller tells nodeshepherd about itself:
// its name, help, configuration sections and flags, validation, when it runs
// under --controllers=*, how it is built, the ClusterRole deploy/ gives it,
// and which kube-controller-manager controller it replaces. Each controller
// package exposes one Descriptor (descriptor.go); pkg/controllers lists them
// once, and `run`, `simulate`, `config default` and the RBAC tests read that
// list. The package lives outside pkg/controller so that controllers can
// import it without importing each other.
//
// Which controllers can run next to a managed control plane's own is each
// descriptor's Info.Companion (docs/companion.md has the table and why).
package descriptor

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// Info is a controller's description, independent of its settings' type.
type Info struct {
	// Name is the controller's name in --controllers.
	Name string
	// Help is its paragraph under "Controllers:" in `run --help`: lines
	// already wrapped at 93 columns, separated by newlines.
	Help string
	// ClusterRole is the ClusterRole in deploy/ that grants what it needs.
	ClusterRole string
	// RBACRules are that ClusterRole's rules and any namespaced Roles as
	// YAML (an RBAC, with a comment saying why), the package's rbac.yaml:
	// `make generate` writes deploy/components/NAME and the Helm chart's
	// rules from them (pkg/generate).
	RBACRules []byte
	// Replaces is the kube-controller-manager controller this one takes over
	// ("" for none): nodeshepherd runs next to kube-controller-manager when
	// that one is turned off there (--controllers=*,-NAME).
	Replaces string
	// Companion says whether the controller can run next to the controllers
	// a managed control plane runs and cannot turn off
	// (kube-controller-manager's, the provider's cloud-controller-manager):
	// true when none of them writes what it writes (docs/companion.md).
	Companion bool
	// Conflicts are what a controller that is not a companion writes that
	// one of those writers writes too: while their managedFields show that
	// writer active, nodeshepherd refuses to run the controller, unless
	// --allow-conflicting-writers names it (pkg/companion). What depends on
	// the controller's settings is Descriptor.ConflictsFor.
	Conflicts []companion.Claim
	// Needs are the controllers that carry out part of this one's work
	// (remediation's Drain steps are the drain controller's): selecting it
	// runs them even when their own settings would not, and excluding one
	// of them while it runs is refused.
	Needs []string
	// CRD is the CustomResourceDefinition the controller's configuration
	// lives in (nil: none): `make generate` puts it into the controller's
	// component and the Helm chart's crds/.
	CRD []byte
	// Tests is what the tests that cover every controller need to run this
	// one, so that adding a controller adds no case to them.
	Tests Tests
}

// Tests is what the tests that take every controller from the registry
// need to run one with work to do: pkg/controllers' (its flags validate),
// pkg/monitoring's (every controller built at once), and test/integration's
// TestStuckControllerGivesUpLease (hung in a step it tracks) and
// TestUnlistedControllersAsServiceAccount (run as deploy/'s ServiceAccount
// when no scenario of serviceAccountScenarios names it). The zero value
// fits a controller that runs with its defaults and finds its work in the
// nodes alone.
type Tests struct {
	// Flags are `run` flags of the controller's own settings under which,
	// named in --controllers, it builds, is not idle and has work on a
	// cluster of Ready nodes (nodeipam: --allocate-node-cidrs and a
	// --cluster-cidr). The controllers it Needs run along with theirs.
	Flags []string
	// Work holds objects (YAML documents) that give it work besides the
	// nodes, created as admin in namespace default, where a ServiceAccount
	// default exists, after its CRD: a pending pod of the scheduler's name,
	// a remediation policy.
	Work string
}

// Section is one section of the configuration file, bound to settings C.
type Section[C any] struct {
	// Name is the section's key in camelCase (nodeLifecycle).
	Name string
	Help string
	// AddFlags registers the section's flags, bound to c, under the
	// upstream flag names; the current values are the defaults.
	AddFlags func(c *C, fs *pflag.FlagSet)
}

// Descriptor describes a controller whose settings are a C.
type Descriptor[C any] struct {
	Info
	// Sections are the controller's sections of the configuration file, in
	// order; a controller without settings has none.
	Sections []Section[C]
	// Default returns the default settings.
	Default func() C
	// Enabled says whether --controllers=* runs the controller with these
	// settings (nodeipam needs --allocate-node-cidrs, for instance); nil
	// means always. Naming the controller explicitly runs it regardless.
	Enabled func(c *C) bool
	// Idle says why the controller has nothing to do on its own with these
	// settings (nil error: it has); naming it then is refused, unless a
	// selected controller Needs it. nil means never idle.
	Idle func(c *C) error
	// WithShared copies the shared settings the controller reads into its
	// own settings (with Take); nil when it reads none. The registry calls
	// it on a copy before Validate and New, so both see complete settings.
	WithShared func(c *C, s *Shared) error
	// Validate checks the settings, naming flags; nil means nothing to check.
	Validate func(c *C) error
	// New builds the controller; dry run and the clients come from ctx.
	New func(c *C, ctx manager.Context) (manager.Controller, error)
	// ConflictsFor returns what the controller, with these (complete)
	// settings, shares with another writer, guarded as Info.Conflicts are:
	// the scheduler's depend on its --scheduler-name (another scheduler
	// serving the same name). A companion may have some: it runs next to a
	// managed control plane with its default settings. nil means none.
	ConflictsFor func(c *C) []companion.Claim
}

// Complete returns a copy of c with the shared settings applied.
func (d Descriptor[C]) Complete(c *C, s *Shared) (C, error) {
	out := *c
	if d.WithShared == nil {
		return out, nil
	}
	return out, d.WithShared(&out, s)
}

// SharedSection is the name of the shared settings' section.
const SharedSection = "shared"

// Shared are the settings more than one controller reads; they live in one
// section so that no controller owns what another depends on. Flag names
// are kube-controller-manager's (node-monitor-period,
// unhealthy-zone-threshold) and Draino's (max-unhealthy-nodes).
type Shared struct {
	// NodeMonitorPeriod: nodelifecycle's full health pass, cloudnodelifecycle's checks.
	NodeMonitorPeriod time.Duration
	// UnhealthyZoneThreshold: nodelifecycle's zone states, drain's circuit breaker.
	UnhealthyZoneThreshold float32
	// MaxUnhealthyNodes: the incident guard of cloudnodelifecycle and drain.
	MaxUnhealthyNodes string
}

// DefaultShared returns kube-controller-manager's defaults and a 45 % guard.
func DefaultShared() Shared {
	return Shared{NodeMonitorPeriod: 5 * time.Second, UnhealthyZoneThreshold: 0.55, MaxUnhealthyNodes: "45%"}
}

// AddFlags registers the shared flags.
func (s *Shared) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&s.NodeMonitorPeriod, "node-monitor-period", s.NodeMonitorPeriod, "Period of the nodelifecycle controller's full node health pass (nodes are also checked the moment their grace period expires) and of the cloudnodelifecycle controller's checks.")
	fs.Float32Var(&s.UnhealthyZoneThreshold, "unhealthy-zone-threshold", s.UnhealthyZoneThreshold, "Fraction of not-ready nodes (at least 3) from which a zone is partially disrupted, for the nodelifecycle controller's rate limits and the drain controller's circuit breaker.")
	fs.StringVar(&s.MaxUnhealthyNodes, "max-unhealthy-nodes", s.MaxUnhealthyNodes, "Incident guard: the cloudnodelifecycle controller deletes no node while more nodes than this are not Ready, and the drain controller starts no cordon or drain while more selected nodes than this are not Ready. A count or a percentage.")
}

// Validate checks the shared settings, with the messages the controllers use.
func (s *Shared) Validate() error {
	var errs []error
	if s.NodeMonitorPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-period must be positive, got %v", s.NodeMonitorPeriod))
	}
	if !(s.UnhealthyZoneThreshold > 0 && s.UnhealthyZoneThreshold <= 1) { // NaN fails too
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], got %v", s.UnhealthyZoneThreshold))
	}
	if _, err := controllerutil.ParseLimit(s.MaxUnhealthyNodes, 100); err != nil {
		errs = append(errs, fmt.Errorf("--max-unhealthy-nodes: %w", err))
	}
	return errors.Join(errs...)
}

// Take copies a shared value into a controller's own copy of it (its
// Config keeps the field, as its unit tests set it). A copy already set to
// something else, by a program rather than by flags, is an error: setting
// the controller's copy instead of Shared must not go unnoticed.
func Take[T comparable](flag string, own *T, shared T) error {
	var zero T
	if *own != zero && *own != shared {
		return fmt.Errorf("--%s is a shared setting: set it in the shared section (controllers.Config.Shared), not in one controller's settings (got %v there, %v shared)", flag, *own, shared)
	}
	*own = shared
	return nil
}

// RBAC is what a controller's rbac.yaml grants: its ClusterRole's rules,
// and Roles in given namespaces (the kubelets' Leases in kube-node-lease).
type RBAC struct {
	ClusterRules []rbacv1.PolicyRule `json:"clusterRules"`
	Roles        []NamespacedRole    `json:"roles,omitempty"`
}

// NamespacedRole is a Role in one namespace, bound to the same subject.
type NamespacedRole struct {
	Name      string              `json:"name"`
	Namespace string              `json:"namespace"`
	Why       string              `json:"why"`
	Rules     []rbacv1.PolicyRule `json:"rules"`
}

// RBAC parses RBACRules strictly.
func (i Info) RBAC() (RBAC, error) {
	var r RBAC
	file := "pkg/controller/" + i.Name + "/rbac.yaml"
	if err := yaml.UnmarshalStrict(i.RBACRules, &r); err != nil {
		return r, fmt.Errorf("%s: %v", file, err)
	}
	if len(r.ClusterRules) == 0 {
		return r, fmt.Errorf("%s: clusterRules is empty; the controller's ClusterRole %s needs at least one rule", file, i.ClusterRole)
	}
	for _, role := range r.Roles {
		if role.Name == "" || role.Namespace == "" || len(role.Rules) == 0 {
			return r, fmt.Errorf("%s: roles: each needs a name, a namespace and rules (got %+v)", file, role)
		}
	}
	return r, nil
}
