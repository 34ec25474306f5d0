package scheduler

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"go.yaml.in/yaml/v3"
)

// --kube-scheduler-config: NodeResourcesFit's args read from a
// KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1), the file
// a cluster already gives kube-scheduler, in its nested form: the profile
// serving --scheduler-name, and in it the pluginConfig named
// NodeResourcesFit, defaulted and validated as kube-scheduler 1.37 does.
// Everything else the format can say is refused, naming the field and the
// flag that does it here: a setting kube-scheduler honours must never look
// honoured when it is not. The file is walked node by node (not decoded
// into structs) so that every error carries its line and field path.

const (
	kubeSchedulerAPIVersion = "kubescheduler.config.k8s.io/v1"
	kubeSchedulerKind       = "KubeSchedulerConfiguration"
	fitArgsKind             = "NodeResourcesFitArgs"
	fitPluginName           = "NodeResourcesFit"
)

// kubeSchedulerTopLevel are KubeSchedulerConfiguration v1's fields besides
// profiles, each with what sets it for nodeshepherd.
var kubeSchedulerTopLevel = map[string]string{
	"parallelism":               "set --scheduler-parallelism instead",
	"percentageOfNodesToScore":  "set --percentage-of-nodes-to-score instead",
	"podInitialBackoffSeconds":  "set --pod-initial-backoff instead",
	"podMaxBackoffSeconds":      "set --pod-max-backoff instead",
	"clientConnection":          "nodeshepherd run's --kubeconfig and --kube-api-* flags set the connection",
	"leaderElection":            "nodeshepherd run's --leader-elect flags elect one leader for all its controllers",
	"enableProfiling":           "set nodeshepherd run's --profiling instead",
	"enableContentionProfiling": "set nodeshepherd run's --contention-profiling instead",
	"extenders":                 "nodeshepherd's scheduler calls no extenders",
	"delayCacheUntilActive":     "nodeshepherd's scheduler starts its informers when it is elected",
}

// otherPluginArgs are the plugins whose args nodeshepherd takes as flags.
var otherPluginArgs = map[string]string{
	"DefaultPreemption": "set --min-candidate-nodes-percentage and --min-candidate-nodes-absolute instead",
	"PodTopologySpread": "set --default-pod-topology-spread instead",
}

// ksPath is a field path as kube-scheduler's validation writes it
// (profiles[0].pluginConfig[1].args.scoringStrategy.type).
type ksPath string

func (p ksPath) child(name string) ksPath {
	if p == "" {
		return ksPath(name)
	}
	return ksPath(string(p) + "." + name)
}

func (p ksPath) index(i int) ksPath { return ksPath(fmt.Sprintf("%s[%d]", p, i)) }

// ksError is an error at a node of the file.
func ksError(n *yaml.Node, p ksPath, format string, args ...any) error {
	if p == "" {
		p = "the document"
	}
	return fmt.Errorf("line %d: %s: %s", n.Line, p, fmt.Sprintf(format, args...))
}

// ksFields calls each field's handler, refusing a node that is not a
// mapping and keys that have none (unknown to the format, as
// kube-scheduler's strict decoding refuses them).
func ksFields(n *yaml.Node, p ksPath, handlers map[string]func(*yaml.Node, ksPath) error) error {
	if n.Kind != yaml.MappingNode {
		return ksError(n, p, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			return ksError(k, p.child(k.Value), "unknown field")
		}
		// A yaml.Node keeps both of a repeated key; kube-scheduler's strict
		// decoding refuses it.
		if seen[k.Value] {
			return ksError(k, p.child(k.Value), "duplicate field")
		}
		seen[k.Value] = true
		// Errors about a field point at its key, not at the first line of
		// a block value below it.
		at := *v
		at.Line = k.Line
		if err := h(&at, p.child(k.Value)); err != nil {
			return err
		}
	}
	return nil
}

// ksSeq calls each for every item of a sequence; null is an empty one.
func ksSeq(n *yaml.Node, p ksPath, each func(int, *yaml.Node, ksPath) error) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return ksError(n, p, "want a list")
	}
	for i, item := range n.Content {
		if err := each(i, item, p.index(i)); err != nil {
			return err
		}
	}
	return nil
}

// ksScalar decodes a scalar of the type of out (string, int32, int64):
// yaml refuses a string where a number goes, as the JSON decoding of
// kube-scheduler does.
func ksScalar[T string | int32 | int64](out *T) func(*yaml.Node, ksPath) error {
	return func(n *yaml.Node, p ksPath) error {
		if n.Kind != yaml.ScalarNode {
			return ksError(n, p, "want a single value")
		}
		var zero T
		_, isString := any(zero).(string)
		switch {
		case isString && n.Tag != "!!str" && n.Tag != "!!null":
			return ksError(n, p, "want a string, got %q", n.Value)
		case !isString && n.Tag == "!!null":
			*out = zero // JSON's null: the field unset
			return nil
		case !isString && (n.Tag != "!!int" || !jsonInteger.MatchString(n.Value)):
			// yaml would truncate 2.5 to 2 and read 0x10 or 1_000;
			// kube-scheduler's JSON decoding refuses them.
			return ksError(n, p, "want an integer, got %q", n.Value)
		}
		if err := n.Decode(out); err != nil {
			return ksError(n, p, "want a %T, got %q", zero, n.Value)
		}
		return nil
	}
}

var jsonInteger = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// ksConst checks apiVersion or kind against the one value it may have.
func ksConst(want string) func(*yaml.Node, ksPath) error {
	return func(n *yaml.Node, p ksPath) error {
		var got string
		if err := ksScalar(&got)(n, p); err != nil {
			return err
		}
		if got != want {
			return ksError(n, p, "want %s, got %q", want, got)
		}
		return nil
	}
}

// LoadKubeSchedulerConfig reads NodeResourcesFit's args for the profile
// serving schedulerName from a KubeSchedulerConfiguration file.
func loadKubeSchedulerConfig(path, schedulerName string) (*fitArgs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := parseKubeSchedulerConfig(data, schedulerName)
	if err != nil {
		return nil, fmt.Errorf("%s:%s", path, strings.TrimPrefix(err.Error(), "line "))
	}
	return a, nil
}

// parseKubeSchedulerConfig is loadKubeSchedulerConfig on the file's bytes;
// its errors begin "line N: ".
func parseKubeSchedulerConfig(data []byte, schedulerName string) (*fitArgs, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if !strings.HasPrefix(msg, "line ") {
			msg = "line 1: " + msg
		}
		return nil, fmt.Errorf("%s", msg)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("line 1: the file is empty: want apiVersion: %s and kind: %s", kubeSchedulerAPIVersion, kubeSchedulerKind)
	}
	root := doc.Content[0]
	type profile struct {
		node  *yaml.Node
		path  ksPath
		name  *string
		fit   *fitArgs
		other []error // what nodeshepherd refuses, should this profile be its own
	}
	var profiles []*profile
	var sawVersion, sawKind bool
	profilesLine := root.Line
	handlers := map[string]func(*yaml.Node, ksPath) error{
		"apiVersion": func(n *yaml.Node, p ksPath) error { sawVersion = true; return ksConst(kubeSchedulerAPIVersion)(n, p) },
		"kind":       func(n *yaml.Node, p ksPath) error { sawKind = true; return ksConst(kubeSchedulerKind)(n, p) },
		"profiles": func(n *yaml.Node, p ksPath) error {
			profilesLine = n.Line
			return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
				pr := &profile{node: item, path: ip}
				profiles = append(profiles, pr)
				return parseKubeSchedulerProfile(item, ip, &pr.name, &pr.fit, &pr.other)
			})
		},
	}
	for field, instead := range kubeSchedulerTopLevel {
		handlers[field] = func(n *yaml.Node, p ksPath) error {
			return ksError(n, p, "not read by nodeshepherd's scheduler, which takes only the profiles' NodeResourcesFit args from this file: %s", instead)
		}
	}
	if err := ksFields(root, "", handlers); err != nil {
		return nil, err
	}
	if !sawVersion || !sawKind {
		return nil, fmt.Errorf("line %d: want apiVersion: %s and kind: %s", root.Line, kubeSchedulerAPIVersion, kubeSchedulerKind)
	}

	// kube-scheduler's defaults and validation of profiles: none is one
	// default-scheduler profile of defaults; a lone profile without a name
	// is default-scheduler; names are otherwise required and unique.
	if len(profiles) == 0 {
		if schedulerName != v1.DefaultSchedulerName {
			return nil, fmt.Errorf("line %d: profiles: the file has none, so only %s is served; it has no profile for --scheduler-name=%s", root.Line, v1.DefaultSchedulerName, schedulerName)
		}
		return defaultFitArgs, nil
	}
	if len(profiles) == 1 && profiles[0].name == nil {
		def := v1.DefaultSchedulerName
		profiles[0].name = &def
	}
	seen := map[string]bool{}
	var names []string
	var mine *profile
	for _, pr := range profiles {
		if pr.name == nil || *pr.name == "" {
			return nil, ksError(pr.node, pr.path.child("schedulerName"), "required: every profile of several needs a name")
		}
		if seen[*pr.name] {
			return nil, ksError(pr.node, pr.path.child("schedulerName"), "duplicate value %q", *pr.name)
		}
		seen[*pr.name] = true
		names = append(names, *pr.name)
		if *pr.name == schedulerName {
			mine = pr
		}
	}
	if mine == nil {
		return nil, fmt.Errorf("line %d: profiles: none has schedulerName %s (--scheduler-name), only %s", profilesLine, schedulerName, strings.Join(names, ", "))
	}
	if len(mine.other) > 0 {
		return nil, mine.other[0]
	}
	if mine.fit == nil {
		return defaultFitArgs, nil
	}
	return mine.fit, nil
}

// parseKubeSchedulerProfile reads one of the profiles: its name, its
// NodeResourcesFit args (validated in every profile, as kube-scheduler
// does), and what nodeshepherd would refuse should it serve the profile.
func parseKubeSchedulerProfile(n *yaml.Node, p ksPath, name **string, fit **fitArgs, other *[]error) error {
	return ksFields(n, p, map[string]func(*yaml.Node, ksPath) error{
		"schedulerName": func(n *yaml.Node, p ksPath) error {
			var s string
			*name = &s
			return ksScalar(&s)(n, p)
		},
		"percentageOfNodesToScore": func(n *yaml.Node, p ksPath) error {
			*other = append(*other, ksError(n, p, "not read by nodeshepherd's scheduler: set --percentage-of-nodes-to-score instead"))
			return nil
		},
		"plugins": func(n *yaml.Node, p ksPath) error {
			*other = append(*other, ksError(n, p, "not read by nodeshepherd's scheduler, which runs kube-scheduler 1.37's default plugins and cannot enable or disable one"))
			return nil
		},
		"pluginConfig": func(n *yaml.Node, p ksPath) error {
			seen := map[string]bool{}
			return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
				var plugin string
				var args *yaml.Node
				err := ksFields(item, ip, map[string]func(*yaml.Node, ksPath) error{
					"name": func(n *yaml.Node, p ksPath) error { return ksScalar(&plugin)(n, p) },
					"args": func(n *yaml.Node, _ ksPath) error { args = n; return nil },
				})
				switch {
				case err != nil:
					return err
				case plugin == "":
					return ksError(item, ip.child("name"), "required")
				case seen[plugin]:
					return ksError(item, ip.child("name"), "duplicate value %q", plugin)
				}
				seen[plugin] = true
				if plugin != fitPluginName {
					instead := otherPluginArgs[plugin]
					if instead == "" {
						instead = "nodeshepherd takes no args for it"
					}
					*other = append(*other, ksError(item, ip, "%s's args are not read by nodeshepherd's scheduler: %s", plugin, instead))
					return nil
				}
				a, err := parseFitArgsNode(args, ip.child("args"))
				*fit = a
				return err
			})
		},
	})
}

// parseFitArgsNode reads NodeResourcesFitArgs, with kube-scheduler's
// defaults (no scoringStrategy: LeastAllocated; no resources: cpu and
// memory; a weight of 0 or none: 1) and its validation, and refuses what
// would do nothing, as the --node-resources-fit-* flags do.
func parseFitArgsNode(n *yaml.Node, p ksPath) (*fitArgs, error) {
	a := &fitArgs{ignored: sets.New[string](), ignoredGroups: sets.New[string]()}
	if n == nil || n.Tag == "!!null" {
		return a.withDefaults(), nil
	}
	var strategy *yaml.Node
	var shapeNode *yaml.Node
	var strategyPath ksPath
	strategySet := false
	err := ksFields(n, p, map[string]func(*yaml.Node, ksPath) error{
		"apiVersion": ksConst(kubeSchedulerAPIVersion),
		"kind":       ksConst(fitArgsKind),
		"ignoredResources": func(n *yaml.Node, p ksPath) error {
			return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
				var name string
				if err := ksScalar(&name)(item, ip); err != nil {
					return err
				}
				if err := checkFitIgnored(name); err != nil {
					return ksError(item, ip, "%v", err)
				}
				a.ignored.Insert(name)
				return nil
			})
		},
		"ignoredResourceGroups": func(n *yaml.Node, p ksPath) error {
			return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
				var g string
				if err := ksScalar(&g)(item, ip); err != nil {
					return err
				}
				if err := checkFitIgnoredGroup(g); err != nil {
					return ksError(item, ip, "%v", err)
				}
				a.ignoredGroups.Insert(g)
				return nil
			})
		},
		"scoringStrategy": func(n *yaml.Node, p ksPath) error {
			if n.Tag == "!!null" {
				return nil
			}
			strategySet, strategy, strategyPath = true, n, p
			return ksFields(n, p, map[string]func(*yaml.Node, ksPath) error{
				"type": func(n *yaml.Node, p ksPath) error {
					if err := ksScalar(&a.strategy)(n, p); err != nil {
						return err
					}
					if !slices.Contains(strategies, a.strategy) {
						return ksError(n, p, "unsupported value %q: want one of %s", a.strategy, strings.Join(strategies, ", "))
					}
					return nil
				},
				"resources": func(n *yaml.Node, p ksPath) error {
					return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
						var name string
						var weight int64
						if err := ksFields(item, ip, map[string]func(*yaml.Node, ksPath) error{
							"name": ksScalar(&name), "weight": ksScalar(&weight),
						}); err != nil {
							return err
						}
						if weight == 0 {
							weight = 1 // kube-scheduler's default for a weight unset or 0
						}
						if weight < 1 || weight > maxResourceWeight {
							return ksError(item, ip.child("weight"), "%d: resource weight of %s not in valid range (0, %d]", weight, name, maxResourceWeight)
						}
						if err := checkFitResourceName(a.resources, name); err != nil {
							return ksError(item, ip.child("name"), "%v", err)
						}
						a.resources = append(a.resources, resourceWeight{v1.ResourceName(name), weight})
						return nil
					})
				},
				"requestedToCapacityRatio": func(n *yaml.Node, p ksPath) error {
					if n.Tag == "!!null" {
						return nil
					}
					shapeNode = n
					return ksFields(n, p, map[string]func(*yaml.Node, ksPath) error{
						"shape": func(n *yaml.Node, p ksPath) error { return parseShapeNode(a, n, p) },
					})
				},
			})
		},
	})
	if err != nil {
		return nil, err
	}
	if !strategySet {
		return a.withDefaults(), nil
	}
	// kube-scheduler refuses a scoringStrategy without a type (not one of
	// the supported ones), unlike a missing scoringStrategy.
	if a.strategy == "" {
		return nil, ksError(strategy, strategyPath.child("type"), "required: one of %s", strings.Join(strategies, ", "))
	}
	switch {
	case a.strategy == StrategyRequestedToCapacityRatio && len(a.shape) == 0:
		at := strategy
		if shapeNode != nil {
			at = shapeNode
		}
		return nil, ksError(at, strategyPath.child("requestedToCapacityRatio").child("shape"),
			"required: %s needs at least one point {utilization: 0-%d, score: 0-%d}", StrategyRequestedToCapacityRatio, maxUtilization, maxShapeScore)
	case a.strategy != StrategyRequestedToCapacityRatio && shapeNode != nil:
		return nil, ksError(shapeNode, strategyPath.child("requestedToCapacityRatio"),
			"used only by type %s, not %s: remove it or set the type", StrategyRequestedToCapacityRatio, a.strategy)
	}
	return a.withDefaults(), nil
}

// parseShapeNode reads requestedToCapacityRatio.shape into a.shape.
func parseShapeNode(a *fitArgs, n *yaml.Node, p ksPath) error {
	return ksSeq(n, p, func(_ int, item *yaml.Node, ip ksPath) error {
		var util, score int32
		if err := ksFields(item, ip, map[string]func(*yaml.Node, ksPath) error{
			"utilization": ksScalar(&util), "score": ksScalar(&score),
		}); err != nil {
			return err
		}
		if !inShapeRange(int64(util), int64(score)) {
			return ksError(item, ip, "utilization %d, score %d: want utilization 0-%d and score 0-%d", util, score, maxUtilization, maxShapeScore)
		}
		if k := len(a.shape); k > 0 && int64(util) <= a.shape[k-1].utilization {
			return ksError(item, ip.child("utilization"), "%d: values must be sorted in increasing order (after %d)", util, a.shape[k-1].utilization)
		}
		a.shape = append(a.shape, shapePoint{int64(util), int64(score) * maxNodeScore / maxShapeScore})
		return nil
	})
}

// withDefaults fills in kube-scheduler's defaults: LeastAllocated, and cpu
// and memory at weight 1 when no resource is listed.
func (a *fitArgs) withDefaults() *fitArgs {
	if a.strategy == "" {
		a.strategy = StrategyLeastAllocated
	}
	if len(a.resources) == 0 {
		a.resources = slices.Clone(defaultFitArgs.resources)
	}
	return a
}
