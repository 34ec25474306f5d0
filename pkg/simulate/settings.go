package simulate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
)

// Settings are the scenario's controllers: block: the configuration
// file's controller sections with its keys (nodeLifecycle:
// {nodeMonitorGracePeriod: 40s}), read by pkg/config as the file is.
type Settings struct {
	node *yaml.Node
}

// UnmarshalYAML keeps the block; parse reads it, with the file's name.
func (s *Settings) UnmarshalYAML(n *yaml.Node) error {
	s.node = n
	return nil
}

// notInSimulations are flags a scenario cannot set: the simulation decides them.
var notInSimulations = []string{"scheduler-name", "allocate-node-cidrs", "cluster-cidr", "service-cluster-ip-range", "cloud-provider",
	"cloud-provider-webhook-url", "drain-rules"}

// rateFlags are per-second rates: time-scaling multiplies them.
var rateFlags = []string{"node-eviction-rate", "secondary-node-eviction-rate"}

// upstreamFlags are the settings kube-controller-manager also has, under the
// same names: the upstream run gets them too.
var upstreamFlags = []string{"node-monitor-period", "node-monitor-grace-period", "node-startup-grace-period", "node-eviction-rate",
	"secondary-node-eviction-rate", "large-cluster-size-threshold", "unhealthy-zone-threshold"}

// parse applies the settings to a fresh configuration; errors name the line.
func (s *Settings) parse(path string) (*controllers.Config, *pflag.FlagSet, error) {
	def := controllers.Default()
	cfg := &def
	fs := pflag.NewFlagSet("controllers", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if s.node == nil || s.node.Tag == "!!null" {
		return cfg, fs, nil
	}
	// Values are read and checked on scratch settings, then set on cfg.
	scratch := controllers.Default()
	sets, err := config.Read(path, s.node, "controllers.", scratch.Sections())
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, a := range sets {
		if slices.Contains(notInSimulations, a.Flag) {
			errs = append(errs, fmt.Errorf("%s:%d: %s is set by the simulation itself and cannot be changed", path, a.Line, a.Key))
		}
	}
	errs = append(errs, config.Check(path, sets, scratch.Sections()))
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return cfg, fs, config.Set(path, sets, fs)
}

// check parses the settings and validates them as `run` would.
func (s *Settings) check(path string) error {
	cfg, _, err := s.parse(path)
	if err != nil {
		return err
	}
	// What the simulation runs: nodeipam and cloudnodelifecycle are set up
	// by the simulation itself, so they are not the scenario's to check.
	if err := cfg.Validate(cfg.Select(controllers.Names, nil)); err != nil {
		return fmt.Errorf("%s: controllers: %w", path, err)
	}
	return nil
}

// scaled returns nodeshepherd's configuration with every duration divided
// by scale and every rate multiplied by it, and the kube-controller-manager
// flags of the same settings for the upstream run. The scheduler's backoffs
// are then rounded to whole seconds, at least 1: kube-scheduler cannot hold
// anything else (podInitialBackoffSeconds, podMaxBackoffSeconds), and both
// runs must back off alike to be compared; nodeshepherd's run is the same
// with and without --compare.
func (s *Settings) scaled(path string, scale float64) (*controllers.Config, []string, error) {
	cfg, fs, err := s.parse(path)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Value.Type() == "duration":
			d, _ := time.ParseDuration(f.Value.String())
			if d > 0 {
				errs = append(errs, fs.Set(f.Name, time.Duration(float64(d)/scale).String()))
			}
		case slices.Contains(rateFlags, f.Name):
			r, _ := strconv.ParseFloat(f.Value.String(), 64)
			errs = append(errs, fs.Set(f.Name, strconv.FormatFloat(r*scale, 'g', -1, 64)))
		}
	})
	// Draino's condition syntax carries a minimum duration of its own.
	for i, c := range cfg.Drain.Conditions {
		rc, err := rules.ParseCondition(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rc.MinDuration = time.Duration(float64(rc.MinDuration) / scale)
		cfg.Drain.Conditions[i] = rc.String()
	}
	sc := &cfg.Scheduler
	sc.PodInitialBackoff = time.Duration(controlplane.BackoffSeconds(sc.PodInitialBackoff)) * time.Second
	sc.PodMaxBackoff = time.Duration(controlplane.BackoffSeconds(sc.PodMaxBackoff)) * time.Second
	var kcm []string
	for _, name := range upstreamFlags {
		kcm = append(kcm, "--"+name+"="+fs.Lookup(name).Value.String())
	}
	return cfg, kcm, errors.Join(errs...)
}
