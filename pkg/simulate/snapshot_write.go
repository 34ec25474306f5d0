package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// ErrOutputExists is returned by Write when the output is there already and
// force is not set.
var ErrOutputExists = errors.New("output exists")

// SnapshotPaths resolves -o: a path ending in .yaml or .yml is the scenario
// file, with workloads/ next to it; anything else is a directory that gets
// scenario.yaml and workloads/.
func SnapshotPaths(out string) (scenarioFile, workloadsDir string) {
	if ext := strings.ToLower(filepath.Ext(out)); ext == ".yaml" || ext == ".yml" {
		return out, filepath.Join(filepath.Dir(out), "workloads")
	}
	return filepath.Join(out, "scenario.yaml"), filepath.Join(out, "workloads")
}

// Write writes the scenario file and its workload files; PrepareOutput has
// checked that there is nothing there to overwrite, unless force: the
// scenario file and the YAML files of workloads/ are then replaced. source
// and name go into the file.
func (s *Snapshot) Write(out, name, source string, force bool) (string, []string, error) {
	scenarioFile, wdir := SnapshotPaths(out)
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return "", nil, err
	}
	if force {
		old, _ := filepath.Glob(filepath.Join(wdir, "*.yaml"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return "", nil, err
			}
		}
	}
	var files []string
	writeFile := func(base, header string, objs []any) error {
		var b bytes.Buffer
		b.WriteString(header)
		for i, o := range objs {
			if i > 0 {
				b.WriteString("---\n")
			}
			data, err := manifestYAML(o)
			if err != nil {
				return err
			}
			b.Write(data)
		}
		p := filepath.Join(wdir, base)
		files = append(files, p)
		return os.WriteFile(p, b.Bytes(), 0o644)
	}
	taken := s.Taken.Format(time.RFC3339)
	if len(s.PriorityClasses) > 0 {
		objs := make([]any, len(s.PriorityClasses))
		for i, pc := range s.PriorityClasses {
			objs[i] = pc
		}
		if err := writeFile("priorityclasses.yaml", fmt.Sprintf("# PriorityClasses of %s at %s (system-* left out).\n", source, taken), objs); err != nil {
			return "", nil, err
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(s.Namespaces)) {
		header := fmt.Sprintf("# Namespace %s of %s at %s: PodDisruptionBudgets, ResourceClaimTemplates, Deployments, StatefulSets, DaemonSets.\n"+
			"# Status, annotations and Secret and ConfigMap references are left out (see the scenario file's header).\n", ns, source, taken)
		if err := writeFile("ns-"+ns+".yaml", header, s.Namespaces[ns]); err != nil {
			return "", nil, err
		}
	}
	text, err := s.scenarioText(name, source, scenarioFile, wdir, files)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(scenarioFile, text, 0o644); err != nil {
		return "", nil, err
	}
	return scenarioFile, files, nil
}

// checkFree refuses to overwrite what is there.
func checkFree(out, scenarioFile, wdir string) error {
	if _, err := os.Stat(scenarioFile); err == nil {
		return fmt.Errorf("%w: %s is there already; pass --force to replace it, or choose another -o", ErrOutputExists, scenarioFile)
	}
	if ents, err := os.ReadDir(wdir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%w: %s is there already and not empty; pass --force to replace its YAML files, or choose another -o", ErrOutputExists, wdir)
	}
	if filepath.Join(out, "scenario.yaml") == scenarioFile {
		if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
			return fmt.Errorf("%w: directory %s is there already and not empty; pass --force to write into it, or choose another -o", ErrOutputExists, out)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			if fi, serr := os.Stat(out); serr == nil && !fi.IsDir() {
				return fmt.Errorf("-o %s is a file, not a directory; name a directory, or a .yaml file for the scenario", out)
			}
		}
	}
	return nil
}

// manifestYAML writes an object as a manifest: no status, no empty
// timestamps.
func manifestYAML(obj any) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	prune(m)
	return sigsyaml.Marshal(m)
}

// prune drops null values (creationTimestamp: null) and empty status
// blocks, at every depth.
func prune(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			if sub, ok := e.(map[string]any); ok && k == "status" && len(sub) == 0 {
				delete(x, k)
				continue
			}
			prune(e)
		}
	case []any:
		for _, e := range x {
			prune(e)
		}
	}
}

// outGroup is a node group as written in the scenario file.
type outGroup struct {
	Name   string            `yaml:"name"`
	Zone   string            `yaml:"zone"`
	Nodes  int               `yaml:"nodes"`
	Shape  outShape          `yaml:"shape"`
	Labels map[string]string `yaml:"labels,omitempty"`
	Taints []Taint           `yaml:"taints,omitempty"`
	Images []string          `yaml:"images,omitempty"`
}

type outShape struct {
	CPU     string `yaml:"cpu,omitempty"`
	Memory  string `yaml:"memory,omitempty"`
	MaxPods int    `yaml:"maxPods,omitempty"`
}

// marshalYAML writes v with 2-space indentation, as the examples are.
func marshalYAML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

func (s *Snapshot) scenarioText(name, source, scenarioFile, wdir string, files []string) ([]byte, error) {
	var b bytes.Buffer
	nodes, zones := s.nodeCount()
	real := 0
	for _, n := range s.Zones {
		real += n
	}
	fmt.Fprintf(&b, "# Written by `nodeshepherd scenario snapshot` from %s at %s.\n", source, s.Taken.Format(time.RFC3339))
	fmt.Fprintf(&b, "# %d nodes in %d zones, in %d node groups (the cluster has %d; scale %.4g: %s).\n", nodes, len(zones), len(s.Groups), real, s.Scale, s.NodeRounding)
	fmt.Fprintf(&b, "# nodeshepherd's settings: %s.\n", orDefault(s.SettingsFrom, "none found, nodeshepherd's defaults"))
	b.WriteString("# Never in here: Secrets, ConfigMap data, env values, command lines, probes, annotations, status.\n")
	if len(s.Notes) > 0 {
		b.WriteString("# Left out or changed:\n")
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "#   %s\n", n)
		}
	}
	fmt.Fprintf(&b, "#\n# Edit the timeline (and duration, expect) below, then:\n#   nodeshepherd simulate %s --compare upstream\n", scenarioFile)
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nname: %s\n", configfile.APIVersion, Kind, name)
	fmt.Fprintf(&b, "description: %s\n", yamlScalar(fmt.Sprintf("Snapshot of %s at %s.", source, s.Taken.Format(time.RFC3339))))
	b.WriteString("# How long the timeline runs, from the moment every workload is ready.\nduration: 5m\n")
	if s.Controllers != nil {
		data, err := marshalYAML(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "controllers"}, s.Controllers}})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "# From %s: its controller sections, without the settings the simulation sets.\n", s.SettingsFrom)
		b.Write(data)
	}
	var groups []outGroup
	for _, g := range s.Groups {
		og := outGroup{Name: g.Name, Zone: g.Zone, Nodes: g.Nodes, Labels: g.Labels, Taints: g.Taints, Images: g.Images, Shape: outShape{MaxPods: g.Shape.MaxPods}}
		if !g.Shape.CPU.IsZero() {
			og.Shape.CPU = g.Shape.CPU.String()
		}
		if !g.Shape.Memory.IsZero() {
			og.Shape.Memory = g.Shape.Memory.String()
		}
		groups = append(groups, og)
	}
	data, err := marshalYAML(map[string]any{"cluster": map[string]any{"nodeGroups": groups}})
	if err != nil {
		return nil, err
	}
	b.WriteString("# Nodes are named fake-node-0000, fake-node-0001, ... group by group.\n")
	if len(s.Images) > 0 {
		b.WriteString("cluster:\n")
		s.writeImages(&b)
		data = bytes.TrimPrefix(data, []byte("cluster:\n"))
	}
	b.Write(data)
	s.writeDevices(&b)
	if len(files) == 0 {
		b.WriteString("workloads: []\n")
	} else {
		b.WriteString("workloads:\n")
	}
	for _, f := range files {
		rel, err := filepath.Rel(filepath.Dir(scenarioFile), f)
		if err != nil {
			rel = f
		}
		fmt.Fprintf(&b, "- file: %s\n", filepath.ToSlash(rel))
	}
	group := s.Groups[0]
	fmt.Fprintf(&b, `# The timeline: what goes wrong when (cluster time). A placeholder that runs as is:
# one node of group %[2]s (zone %[1]s) loses its network for 45s. Replace it with your incident, e.g.
#   - {at: 1m, action: partition, zone: %[1]s, for: 5m}                # a zone falls silent
#   - {at: 1m, action: partition, group: %[2]s, for: 5m}               # a node pool falls silent
#   - {at: 1m, action: kubelet-restart, zone: %[1]s, count: 2, for: 30s}
#   - {at: 2m, action: set-condition, condition: KernelDeadlock=True, nodes: [fake-node-0000]}
#   - {at: 2m, action: machine-shutdown, nodes: [fake-node-0001]}     # powered off for good
#   - {at: 3m, action: burst, burst: {name: urgent, replicas: 10, priorityClassName: high, cpu: "1"}}
# (docs/simulate.md lists every action.)
timeline:
- {at: 1m, action: network-blip, group: %[2]s, count: 1, for: 45s}
# Bounds that must hold, e.g.
#   - {metric: podNotReadyAfterRecovery, atMost: 30s}
#   - {metric: podsEvicted, atMost: 0}
expect: []
`, group.Zone, group.Name)
	return b.Bytes(), nil
}

// writeImages writes cluster.images, one image a line with its size for
// people, and cluster.node.images.
func (s *Snapshot) writeImages(b *bytes.Buffer) {
	b.WriteString("  # The container images the nodes report (node.status.images), each once with its size in bytes:\n" +
		"  # those that at least half of a group's nodes report; node.images are every group's, a group's\n" +
		"  # images the rest of its own. The images only some nodes have pulled are left out.\n" +
		"  images:\n")
	for _, im := range s.Images {
		names := "name: " + flowScalar(im.Name)
		if im.Name == "" {
			quoted := make([]string, len(im.Names))
			for i, n := range im.Names {
				quoted[i] = flowScalar(n)
			}
			names = "names: [" + strings.Join(quoted, ", ") + "]"
		}
		fmt.Fprintf(b, "  - {%s, size: %d}  # %s\n", names, im.Size.Bytes, fakenode.FormatImageSize(im.Size.Bytes))
	}
	if len(s.NodeImages) > 0 {
		b.WriteString("  node:\n    images:\n")
		for _, n := range s.NodeImages {
			fmt.Fprintf(b, "    - %s\n", yamlScalar(n))
		}
	}
}

// flowScalar quotes s when YAML would read it, inside [] or {}, as
// something else.
func flowScalar(s string) string {
	if yamlScalar(s) != s || strings.ContainsAny(s, ",[]{}#") {
		return strconv.Quote(s)
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// yamlScalar quotes s when YAML would read it as something else.
func yamlScalar(s string) string {
	data, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSpace(string(data))
}

// Size returns the scenario's nodes and the replicas of its Deployments
// and StatefulSets, for simulate's limits.
func (s *Snapshot) Size() (nodes, replicas int) {
	nodes, _ = s.nodeCount()
	for _, objs := range s.Namespaces {
		for _, o := range objs {
			switch x := o.(type) {
			case *appsv1.Deployment:
				replicas += int(ptr.Deref(x.Spec.Replicas, 1))
			case *appsv1.StatefulSet:
				replicas += int(ptr.Deref(x.Spec.Replicas, 1))
			}
		}
	}
	return nodes, replicas
}

// nodeCount returns the scenario's nodes and its zones, sorted.
func (s *Snapshot) nodeCount() (int, []string) {
	n := 0
	var zones []string
	for _, g := range s.Groups {
		n += g.Nodes
		if !slices.Contains(zones, g.Zone) {
			zones = append(zones, g.Zone)
		}
	}
	slices.Sort(zones)
	return n, zones
}

// PrintSummary says what the scenario holds and what was left out.
func (s *Snapshot) PrintSummary(w io.Writer) {
	nodes, zones := s.nodeCount()
	fmt.Fprintf(w, "Nodes: %d in %d zones, %d node groups (scale %.4g; %s)\n", nodes, len(zones), len(s.Groups), s.Scale, s.NodeRounding)
	for _, z := range zones {
		n := 0
		var names []string
		for _, g := range s.Groups {
			if g.Zone == z {
				n += g.Nodes
				names = append(names, fmt.Sprintf("%s: %d", g.Name, g.Nodes))
			}
		}
		fmt.Fprintf(w, "  %-20s %d nodes (cluster: %d)  %s\n", z, n, s.Zones[z], strings.Join(names, ", "))
	}
	var deps, sts, dss, pdbs, pods int
	for _, objs := range s.Namespaces {
		for _, o := range objs {
			switch x := o.(type) {
			case *appsv1.Deployment:
				deps++
				pods += int(ptr.Deref(x.Spec.Replicas, 1))
			case *appsv1.StatefulSet:
				sts++
				pods += int(ptr.Deref(x.Spec.Replicas, 1))
			case *appsv1.DaemonSet:
				dss++
			case *policyv1.PodDisruptionBudget:
				pdbs++
			}
		}
	}
	fmt.Fprintf(w, "Workloads: %d Deployments and %d StatefulSets (%d replicas in all), %d DaemonSets, %d PodDisruptionBudgets, %d PriorityClasses in %d namespaces\n",
		deps, sts, pods, dss, pdbs, len(s.PriorityClasses), len(s.Namespaces))
	switch {
	case s.ImagesSeen == 0:
		fmt.Fprintln(w, "Images: none (the nodes report no status.images)")
	default:
		fmt.Fprintf(w, "Images: %d of the %d the nodes report (those at least half of a group's nodes report), %d of them in every group (cluster.node.images)\n",
			len(s.Images), s.ImagesSeen, len(s.NodeImages))
	}
	if entries := s.deviceEntries(); len(entries) > 0 {
		var sets []string
		for _, d := range entries {
			where := "every group"
			if len(d.NodeGroups) > 0 {
				where = strings.Join(d.NodeGroups, ", ")
			}
			sets = append(sets, fmt.Sprintf("%d of %s a node (%s)", d.Count, d.Driver, where))
		}
		fmt.Fprintf(w, "Devices: %s\n", strings.Join(sets, "; "))
	}
	fmt.Fprintf(w, "Settings: %s\n", orDefault(s.SettingsFrom, "none found (nodeshepherd's defaults)"))
	if len(s.Notes) == 0 {
		fmt.Fprintln(w, "Stripped: nothing (no Secret or ConfigMap references)")
		return
	}
	fmt.Fprintf(w, "Stripped or changed (%d):\n", len(s.Notes))
	for _, n := range s.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// ValidScenarioName says whether name can be a scenario's name (its report
// directory's).
func ValidScenarioName(name string) bool { return validName.MatchString(name) }

// PrepareOutput checks that -o can be written before the cluster is read:
// without force, nothing is there to overwrite; workloads/ is created. The
// returned function removes what it created, for when the snapshot fails.
func PrepareOutput(out string, force bool) (cleanup func(), err error) {
	scenarioFile, wdir := SnapshotPaths(out)
	if !force {
		if err := checkFree(out, scenarioFile, wdir); err != nil {
			return nil, err
		}
	}
	// The first missing directory is what MkdirAll creates, and what goes.
	first := ""
	for d := wdir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		first = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return nil, fmt.Errorf("-o %s: cannot create %s: %w", out, wdir, err)
	}
	probe, err := os.CreateTemp(filepath.Dir(scenarioFile), ".snapshot-probe-*")
	if err != nil {
		return nil, fmt.Errorf("-o %s: cannot write in %s: %w", out, filepath.Dir(scenarioFile), err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return func() {
		if first != "" {
			os.RemoveAll(first)
		}
	}, nil
}
