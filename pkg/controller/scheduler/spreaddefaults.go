package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Values of --default-pod-topology-spread besides a list.
const (
	SpreadDefaultsSystem = "system"
	SpreadDefaultsNone   = "none"
)

// spreadDefaults is PodTopologySpreadArgs' defaultingType and
// defaultConstraints: the constraints of pods that have none.
type spreadDefaults struct {
	// system: kube-scheduler's system defaults (defaultingType System),
	// under which nodes without a zone label are still scored.
	system bool
	list   []v1.TopologySpreadConstraint
}

// systemSpreadDefaults are kube-scheduler's system default constraints.
var systemSpreadDefaults = []v1.TopologySpreadConstraint{
	{MaxSkew: 3, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.ScheduleAnyway},
	{MaxSkew: 5, TopologyKey: v1.LabelTopologyZone, WhenUnsatisfiable: v1.ScheduleAnyway},
}

func (d spreadDefaults) constraints() []v1.TopologySpreadConstraint {
	if d.system {
		return systemSpreadDefaults
	}
	return d.list
}

// parseSpreadDefaults reads --default-pod-topology-spread: "system", "none",
// or a comma-separated list of <topologyKey>:<maxSkew>[:<whenUnsatisfiable>]
// (whenUnsatisfiable ScheduleAnyway or DoNotSchedule, default
// ScheduleAnyway), checked as kube-scheduler checks defaultConstraints.
func parseSpreadDefaults(s string) (spreadDefaults, error) {
	const flag = "--default-pod-topology-spread"
	switch strings.TrimSpace(s) {
	case SpreadDefaultsSystem:
		return spreadDefaults{system: true}, nil
	case SpreadDefaultsNone:
		return spreadDefaults{}, nil
	case "":
		return spreadDefaults{}, fmt.Errorf("%s must be %q, %q or a list of <topologyKey>:<maxSkew>[:ScheduleAnyway|DoNotSchedule], got an empty value", flag, SpreadDefaultsSystem, SpreadDefaultsNone)
	}
	var d spreadDefaults
	seen := map[string]bool{}
	for i, item := range strings.Split(s, ",") {
		where := fmt.Sprintf("%s item %d (%q)", flag, i+1, item)
		parts := strings.Split(strings.TrimSpace(item), ":")
		if len(parts) < 2 || len(parts) > 3 {
			return spreadDefaults{}, fmt.Errorf("%s: want <topologyKey>:<maxSkew>[:ScheduleAnyway|DoNotSchedule], e.g. topology.kubernetes.io/zone:5", where)
		}
		key := parts[0]
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return spreadDefaults{}, fmt.Errorf("%s: topology key %q is not a valid label key: %s", where, key, strings.Join(errs, "; "))
		}
		skew, err := strconv.ParseInt(parts[1], 10, 32)
		if err != nil || skew < 1 {
			return spreadDefaults{}, fmt.Errorf("%s: maxSkew %q must be a whole number of at least 1", where, parts[1])
		}
		when := v1.ScheduleAnyway
		if len(parts) == 3 {
			when = v1.UnsatisfiableConstraintAction(parts[2])
			if when != v1.ScheduleAnyway && when != v1.DoNotSchedule {
				return spreadDefaults{}, fmt.Errorf("%s: whenUnsatisfiable %q must be ScheduleAnyway or DoNotSchedule", where, parts[2])
			}
		}
		if id := key + "/" + string(when); seen[id] {
			return spreadDefaults{}, fmt.Errorf("%s: a constraint on %s with %s is already listed", where, key, when)
		} else {
			seen[id] = true
		}
		d.list = append(d.list, v1.TopologySpreadConstraint{MaxSkew: int32(skew), TopologyKey: key, WhenUnsatisfiable: when})
	}
	return d, nil
}
