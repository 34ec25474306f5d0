package controllers

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
)

// Every controller package is in the registry, once, under its directory's
// name, and describes itself in descriptor.go: adding a controller is one
// package and one registry line.
func TestRegistryListsEveryControllerOnce(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("..", "controller"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) < 6 {
		t.Fatalf("found %d controller packages, want at least six: %v", len(dirs), dirs)
	}
	seen := map[string]bool{}
	for _, d := range Registry() {
		if seen[d.Name] {
			t.Errorf("the registry lists %s twice", d.Name)
		}
		seen[d.Name] = true
		if d.Help == "" || d.ClusterRole == "" {
			t.Errorf("%s: the descriptor lacks its help or ClusterRole", d.Name)
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join("..", "controller", dir, "descriptor.go")); err != nil {
			t.Errorf("pkg/controller/%s has no descriptor.go: %v", dir, err)
		}
		if !seen[dir] {
			t.Errorf("pkg/controller/%s is not in the registry (pkg/controllers/controllers.go)", dir)
		}
	}
	// The start order of the controllers this test knows stays; a new
	// controller goes anywhere.
	known := []string{"nodelifecycle", "tainteviction", "nodeipam", "cloudnodelifecycle", "drain", "scheduler", "outofservice", "readinessrestore", "remediation"}
	if got := slices.DeleteFunc(slices.Clone(Names), func(n string) bool { return !slices.Contains(known, n) }); !slices.Equal(got, known) {
		t.Errorf("start order changed: %v, want %v in this order (pkg/controllers/controllers.go)", Names, known)
	}
	if got, want := KubeControllerManagerFlag(), "*,-nodelifecycle,-taint-eviction-controller,-nodeipam"; got != want {
		t.Errorf("kube-controller-manager --controllers %q, want %q", got, want)
	}
	// The local control plane starts kube-controller-manager without what
	// nodeshepherd replaces; its default (controlplane up, tests) must follow.
	if got, want := controlplane.DefaultControllers, KubeControllerManagerFlag(); got != want {
		t.Errorf("controlplane.DefaultControllers %q, want the registry's %q", got, want)
	}
}

// Section names are unique, each flag is registered once, and every flag's
// key in the file maps back to the flag (the parser relies on it).
func TestSectionsAreDistinct(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("all", pflag.ContinueOnError)
	var names []string
	for _, s := range c.Sections() {
		if slices.Contains(names, s.Name) {
			t.Errorf("section %s twice", s.Name)
		}
		names = append(names, s.Name)
		s.Register(fs) // pflag panics on a flag registered twice
	}
	if names[0] != "shared" {
		t.Errorf("sections %v: the shared one comes first", names)
	}
}

// Programs that set a shared setting on one controller's copy are told to
// set it in Shared instead of having it silently overridden.
func TestSharedSettingSetOnAControllerIsAnError(t *testing.T) {
	c := Default()
	if err := c.Validate(c.Select(Names, nil)); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	c.NodeLifecycle.NodeMonitorPeriod = 1
	err := c.Validate(c.Select(Names, nil))
	if err == nil || !strings.Contains(err.Error(), "--node-monitor-period is a shared setting") {
		t.Fatalf("error %v", err)
	}
}

// Every ClusterRole the registry names is created and bound in the
// controller's component, deploy/components/NAME.
func TestRegistryRolesAreInDeploy(t *testing.T) {
	roles, bound := map[string]bool{}, map[string]bool{}
	for _, d := range Registry() {
		f := filepath.Join("..", "..", "deploy", "components", d.Name, "rbac.yaml")
		data, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("%s needs its ClusterRole %s in a component: %v", d.Name, d.ClusterRole, err)
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				Kind     string `yaml:"kind"`
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
				RoleRef struct {
					Kind string `yaml:"kind"`
					Name string `yaml:"name"`
				} `yaml:"roleRef"`
			}
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			switch doc.Kind {
			case "ClusterRole":
				roles[doc.Metadata.Name] = true
			case "ClusterRoleBinding":
				if doc.RoleRef.Kind == "ClusterRole" {
					bound[doc.RoleRef.Name] = true
				}
			}
		}
	}
	for _, d := range Registry() {
		if !roles[d.ClusterRole] || !bound[d.ClusterRole] {
			t.Errorf("%s needs ClusterRole %s: in deploy/components/%s %v, bound %v", d.Name, d.ClusterRole, d.Name, roles[d.ClusterRole], bound[d.ClusterRole])
		}
	}
}

// Companion mode: the controllers a managed cluster lets run next to its own
// kube-controller-manager, and those that write what it writes, with the
// evidence nodeshepherd looks for.
func TestCompanionsAndConflicts(t *testing.T) {
	// Those this test knows stay what they are; a new controller is either.
	for name, want := range map[string]bool{"nodelifecycle": false, "tainteviction": false, "nodeipam": false, "cloudnodelifecycle": false,
		"drain": true, "scheduler": true, "outofservice": true, "readinessrestore": true, "remediation": true} {
		if got := slices.Contains(Companions(), name); got != want {
			t.Errorf("%s: companion %v, want %v (companions %v)", name, got, want, Companions())
		}
	}
	for _, d := range Registry() {
		if d.Companion == (len(d.Conflicts) > 0) {
			t.Errorf("%s: a companion names no conflicts, and every other controller names what it conflicts on (companion %v, %d conflicts)", d.Name, d.Companion, len(d.Conflicts))
		}
	}
	// The scheduler is a companion under a name of its own, and guarded
	// against another scheduler of its name: by kube-scheduler's Lease too
	// when that name is default-scheduler.
	leases := func(c *Config) (claims, leases int) {
		for _, cl := range Conflicts(c, "scheduler") {
			claims++
			if cl.Lease == companion.KubeScheduler {
				leases++
			}
		}
		return claims, leases
	}
	c := Default()
	if claims, l := leases(&c); claims == 0 || l != 0 {
		t.Errorf("scheduler as %s: %d claims, %d on kube-scheduler's Lease; want some, none on the Lease", c.Scheduler.SchedulerName, claims, l)
	}
	c.Scheduler.SchedulerName = "default-scheduler"
	if _, l := leases(&c); l != 1 {
		t.Errorf("scheduler as default-scheduler: %d claims on kube-scheduler's Lease, want 1", l)
	}
	if got := Conflicts(&c, "nodelifecycle"); len(got) != len(companion.NodeLifecycle) {
		t.Errorf("nodelifecycle's conflicts: %d, want its descriptor's %d", len(got), len(companion.NodeLifecycle))
	}
	c = Default()
	c.Companion.AllowConflictingWriters = []string{"nodelifecycle", "nodelifecycel"}
	if err := c.Validate([]string{"drain"}); err == nil || !strings.Contains(err.Error(), `unknown controller "nodelifecycel" in --allow-conflicting-writers`) {
		t.Errorf("error %v", err)
	}
}

// A controller that another needs runs with it, though off by its own
// settings (drain has no rule here), and leaving it out is refused.
func TestNeededControllersRunAlong(t *testing.T) {
	c := Default()
	if got := c.Select([]string{"drain", "remediation"}, []string{"remediation"}); !slices.Equal(got, []string{"drain", "remediation"}) {
		t.Errorf("Select with remediation named: %v, want drain kept", got)
	}
	if got := c.Select([]string{"drain", "scheduler"}, nil); slices.Contains(got, "drain") {
		t.Errorf("Select without remediation: %v, drain has no rule and should be dropped", got)
	}
	err := c.Validate([]string{"remediation"})
	if err == nil || !strings.Contains(err.Error(), "remediation needs drain") {
		t.Errorf("Validate without drain: %v", err)
	}
	for _, e := range registry {
		for _, need := range e.info().Needs {
			if !slices.Contains(Names, need) {
				t.Errorf("%s needs %q, which is no controller", e.info().Name, need)
			}
		}
	}
}

// The drain controller named without a rule would do nothing: refused,
// unless the remediation controller, which needs it, runs too.
func TestIdleControllerRefusedUnlessNeeded(t *testing.T) {
	c := Default()
	if err := c.Validate([]string{"drain"}); err == nil || !strings.Contains(err.Error(), "needs --drain-condition") {
		t.Errorf("drain alone without rules: %v", err)
	}
	if err := c.Validate([]string{"drain", "remediation"}); err != nil {
		t.Errorf("drain for remediation: %v", err)
	}
}

// A controller's Tests are stated once: in its descriptor, or, for those
// written before the field, in registeredTests.
func TestTestsStatedOnce(t *testing.T) {
	for name := range registeredTests {
		if !slices.Contains(Names, name) {
			t.Errorf("registeredTests names %q, which is no controller", name)
		}
	}
	for _, e := range registry {
		name := e.info().Name
		if _, ok := registeredTests[name]; ok && !reflect.DeepEqual(e.ownTests(), descriptor.Tests{}) {
			t.Errorf("%s states its Tests in its descriptor and in registeredTests (pkg/controllers/tests.go): drop the latter", name)
		}
	}
}

// Each controller, named with the flags its descriptor gives its tests
// (Tests.Flags) and with the controllers it needs, validates, is selected
// and is not idle; its Tests.Work is objects to create.
func TestEveryControllerRunsWithItsTestFlags(t *testing.T) {
	for _, d := range Registry() {
		c, run, err := ForTests([]string{d.Name})
		if err != nil {
			t.Errorf("%s: %v", d.Name, err)
			continue
		}
		if !slices.Contains(run, d.Name) || !slices.Equal(run, c.Select(run, run)) {
			t.Errorf("%s: ForTests runs %v, selected %v", d.Name, run, c.Select(run, run))
		}
		if err := c.Validate(run); err != nil {
			t.Errorf("%s: with its Tests.Flags %q (and those of %v), --controllers=%s does not validate: %v; give its descriptor the flags it needs",
				d.Name, d.Tests.Flags, d.Needs, strings.Join(run, ","), err)
		}
		for i, doc := range strings.Split(d.Tests.Work, "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var obj struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
				t.Errorf("%s: Tests.Work document %d is not an object with apiVersion, kind and metadata.name: %v", d.Name, i, err)
			}
		}
	}
	if _, _, err := ForTests([]string{"nodelifecycel"}); err == nil {
		t.Error("ForTests of an unknown controller: no error")
	}
	c, run, err := ForTests([]string{"remediation"})
	if err != nil || !slices.Equal(run, []string{"drain", "remediation"}) || !c.Drain.Configured() {
		t.Errorf("ForTests(remediation): runs %v with drain's flags %v, %v; want drain run along with its flags", run, c.Drain, err)
	}
}

// Issue 46: the remediation controller confirms a Fence with outofservice's
// fencing endpoint too: the registry hands it the endpoint's flags (one
// endpoint, one set of flags), and remediation checks them even when
// outofservice, which checks them too, does not run in the process.
func TestRemediationGetsTheFencingEndpoint(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--out-of-service-fencing-webhook-url=https://fence.example/q", "--out-of-service-fencing-webhook-timeout=3s"}); err != nil {
		t.Fatal(err)
	}
	var got *remediation.Config
	for _, e := range registry {
		if b, ok := e.(bound[remediation.Config]); ok {
			got = b.field(&c)
		}
	}
	if got == nil || got.Fencing != c.OutOfService.Fencing || got.Fencing.URL != "https://fence.example/q" {
		t.Fatalf("remediation's fencing endpoint %+v, want outofservice's %+v", got, c.OutOfService.Fencing)
	}
	if err := c.Validate([]string{"drain", "remediation"}); err != nil {
		t.Errorf("a valid endpoint: %v", err)
	}
	if err := fs.Parse([]string{"--out-of-service-fencing-webhook-url=http://fence.example/q"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate([]string{"drain", "remediation"}); err == nil || !strings.Contains(err.Error(), "--out-of-service-fencing-webhook-url") {
		t.Errorf("an http:// endpoint for remediation alone: %v", err)
	}
}
