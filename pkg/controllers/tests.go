package controllers

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
)

// registeredTests are the Tests (descriptor.Info.Tests) of the controllers
// whose descriptor.go was written before the field existed: the registry
// gives them here, and a new controller states its own in its descriptor
// (TestTestsStatedOnce: never both). They move into the descriptors with
// the next change to those packages.
var registeredTests = map[string]descriptor.Tests{
	"nodeipam":           {Flags: []string{"--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16"}},
	"cloudnodelifecycle": {Flags: []string{"--cloud-provider=fake"}},
	"drain":              {Flags: []string{"--drain-condition=KernelDeadlock=True,10m"}},
	// A pending pod of its name (the tests create namespace default's
	// ServiceAccount, which no controller makes there).
	"scheduler": {Flags: []string{"--scheduler-name=tests-scheduler"}, Work: `
apiVersion: v1
kind: Pod
metadata: {name: tests-scheduler}
spec:
  schedulerName: tests-scheduler
  containers: [{name: c, image: pause}]
`},
	// Its work, a pod kube-controller-manager marked NotReady, is a status
	// write under kube-controller-manager's field manager, which objects
	// to create cannot say: TestStuckControllerGivesUpLease makes it.
	"readinessrestore": {Flags: []string{"--readiness-restore-delay=1s"}},
	// A policy over every node (its CRD is the descriptor's).
	"remediation": {Work: `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: tests}
spec:
  unhealthy: [{type: KernelDeadlock, status: "True", for: 1m}]
  healthyHold: 1m
  steps: [{action: Taint, timeout: 10m, taint: {key: nodeshepherd.io/tests, effect: NoSchedule}}]
`},
}

// ForTests returns the default settings with the Tests.Flags of the named
// controllers and of the controllers they need, and the controllers to run
// for them: those, in start order.
func ForTests(names []string) (Config, []string, error) {
	c := Default()
	want := map[string]bool{}
	var add func(name string)
	add = func(name string) {
		if !want[name] {
			want[name] = true
			for _, need := range infoOf(name).Needs {
				add(need)
			}
		}
	}
	for _, n := range names {
		if !slices.Contains(Names, n) {
			return c, nil, fmt.Errorf("no controller %q", n)
		}
		add(n)
	}
	run := slices.DeleteFunc(slices.Clone(Names), func(n string) bool { return !want[n] })
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs)
	flags := FlagsForTests(run)
	if err := fs.Parse(flags); err != nil {
		return c, nil, fmt.Errorf("the controllers' Tests.Flags %q: %w", flags, err)
	}
	return c, run, nil
}

// FlagsForTests are the Tests.Flags of the named controllers, in order:
// `run` flags, with ForTests' --controllers the settings ForTests gives.
func FlagsForTests(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, infoOf(n).Tests.Flags...)
	}
	return out
}

// infoOf is the named controller's description (zero for none).
func infoOf(name string) descriptor.Info {
	for _, e := range registry {
		if e.info().Name == name {
			return e.info()
		}
	}
	return descriptor.Info{}
}
