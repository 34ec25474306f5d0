package simulate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

// Settings are controller flags by name, as `nodeshepherd run` takes them.
type Settings struct {
	entries []setting
}

type setting struct {
	flag   string
	values []string
	node   *yaml.Node
}

// UnmarshalYAML takes a mapping of flag names to a scalar or a list of
// scalars (for repeatable flags such as drain-condition).
func (s *Settings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: controllers: expected a mapping of `nodeshepherd run` flag names to values", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		e := setting{flag: strings.TrimPrefix(k.Value, "--"), node: k}
		switch v.Kind {
		case yaml.ScalarNode:
			e.values = []string{v.Value}
		case yaml.SequenceNode:
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: controllers.%s: list items must be plain values", it.Line, k.Value)
				}
				e.values = append(e.values, it.Value)
			}
		default:
			return fmt.Errorf("line %d: controllers.%s: expected a value or a list of values", v.Line, k.Value)
		}
		s.entries = append(s.entries, e)
	}
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
	var errs []error
	for _, e := range s.entries {
		f := fs.Lookup(e.flag)
		switch {
		case f == nil:
			errs = append(errs, fmt.Errorf("%s:%d: controllers: unknown setting %q; settings are `nodeshepherd run` flag names without dashes, e.g. node-monitor-grace-period (see nodeshepherd run --help)", path, e.node.Line, e.flag))
			continue
		case slices.Contains(notInSimulations, e.flag):
			errs = append(errs, fmt.Errorf("%s:%d: controllers: %s is set by the simulation itself and cannot be changed", path, e.node.Line, e.flag))
			continue
		case len(e.values) > 1 && !strings.HasSuffix(f.Value.Type(), "Array") && !strings.HasSuffix(f.Value.Type(), "Slice"):
			errs = append(errs, fmt.Errorf("%s:%d: controllers: %s takes one value, got a list", path, e.node.Line, e.flag))
			continue
		}
		for _, v := range e.values {
			if err := fs.Set(e.flag, v); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: controllers: %s: %v", path, e.node.Line, e.flag, err))
			}
		}
	}
	return cfg, fs, errors.Join(errs...)
}

// check parses the settings and validates them as `run` would.
func (s *Settings) check(path string) error {
	cfg, _, err := s.parse(path)
	if err != nil {
		return err
	}
	if err := cfg.Validate(cfg.Select([]string{scheduler.Name, drain.Name}, nil)); err != nil {
		return fmt.Errorf("%s: controllers: %w", path, err)
	}
	return nil
}

// scaled returns nodeshepherd's configuration with every duration divided
// by scale and every rate multiplied by it, and the kube-controller-manager
// flags of the same settings for the upstream run.
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
	var kcm []string
	for _, name := range upstreamFlags {
		kcm = append(kcm, "--"+name+"="+fs.Lookup(name).Value.String())
	}
	return cfg, kcm, errors.Join(errs...)
}
