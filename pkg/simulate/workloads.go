package simulate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"k8s.io/utils/ptr"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"

	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Workload is an entry of `workloads:`: a Kubernetes manifest inline, or
// {file: PATH} naming a YAML file (relative to the scenario) with one or
// more manifests.
type Workload struct {
	node    *yaml.Node
	objects []manifest
}

// manifest is one decoded object and where it was written.
type manifest struct {
	obj runtime.Object
	src string // file:line
}

// UnmarshalYAML keeps the node; loadWorkloads decodes it once the scenario's
// path is known.
func (w *Workload) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: workloads: expected a manifest (apiVersion, kind, ...) or {file: PATH}", n.Line)
	}
	w.node = n
	return nil
}

// strict decodes manifests rejecting unknown and duplicate fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

func (s *Scenario) loadWorkloads() error {
	var errs []error
	for i := range s.Workloads {
		w := &s.Workloads[i]
		if f := field(w.node, "file"); f != nil {
			if len(w.node.Content) != 2 {
				errs = append(errs, fmt.Errorf("%s:%d: workloads[%d]: {file: PATH} takes nothing else", s.path, w.node.Line, i))
				continue
			}
			objs, err := readManifests(filepath.Join(filepath.Dir(s.path), f.Value))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: workloads[%d]: %w", s.path, f.Line, i, err))
			}
			w.objects = objs
			continue
		}
		m, err := decodeManifest(w.node, s.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("workloads[%d]: %w", i, err))
			continue
		}
		w.objects = []manifest{m}
	}
	if pods := s.workloadPods(); pods > MaxPods {
		errs = append(errs, fmt.Errorf("%s: workloads: %d replicas in all, more than the limit of %d pods", s.path, pods, MaxPods))
	}
	return errors.Join(errs...)
}

// workloadPods counts the replicas the workloads ask for (DaemonSets: one
// per node, counted as such by the node limit).
func (s *Scenario) workloadPods() int {
	n := 0
	for _, w := range s.Workloads {
		for _, m := range w.objects {
			switch o := m.obj.(type) {
			case *appsv1.Deployment:
				n += int(ptr.Deref(o.Spec.Replicas, 1))
			case *appsv1.StatefulSet:
				n += int(ptr.Deref(o.Spec.Replicas, 1))
			}
		}
	}
	return n
}

// readManifests decodes every document of a YAML file.
func readManifests(path string) ([]manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []manifest
	var errs []error
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		m, err := decodeManifest(doc.Content[0], path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 && len(errs) == 0 {
		return nil, fmt.Errorf("%s holds no manifests", path)
	}
	return out, errors.Join(errs...)
}

// decodeManifest turns a YAML mapping into a typed object, strictly.
func decodeManifest(n *yaml.Node, path string) (manifest, error) {
	src := fmt.Sprintf("%s:%d", path, n.Line)
	var v map[string]any
	if err := n.Decode(&v); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", src, err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return manifest{}, fmt.Errorf("%s: %w", src, err)
	}
	obj, gvk, err := strict.Decode(data, nil, nil)
	if err != nil && gvk != nil && gvk.Kind == rem.Kind && gvk.Group == rem.Group {
		return manifest{}, fmt.Errorf("%s: a %s is not a workload: list it under remediationPolicies", src, rem.Kind)
	}
	if err != nil {
		if gvk != nil && gvk.Kind != "" && obj == nil {
			return manifest{}, fmt.Errorf("%s: %s %s: %v (scenarios take built-in Kubernetes kinds)", src, gvk.GroupVersion(), gvk.Kind, err)
		}
		return manifest{}, fmt.Errorf("%s: %v", src, err)
	}
	if acc, ok := obj.(interface{ GetName() string }); !ok || acc.GetName() == "" {
		return manifest{}, fmt.Errorf("%s: metadata.name is missing", src)
	}
	return manifest{obj: obj, src: src}, nil
}

// manifests returns every workload object, deep-copied, with toleration
// seconds divided by scale.
func (s *Scenario) manifests(scale float64) []manifest {
	var out []manifest
	for _, w := range s.Workloads {
		for _, m := range w.objects {
			obj := m.obj.DeepCopyObject()
			if spec := podSpec(obj); spec != nil {
				for i := range spec.Tolerations {
					if t := spec.Tolerations[i].TolerationSeconds; t != nil {
						v := scaleSeconds(*t, scale)
						spec.Tolerations[i].TolerationSeconds = &v
					}
				}
			}
			out = append(out, manifest{obj: obj, src: m.src})
		}
	}
	return out
}

// services returns the scenario's Services by namespace/name, with their
// pod selectors (nil for a Service without one).
func (s *Scenario) services() map[string]labels.Selector {
	out := map[string]labels.Selector{}
	for _, w := range s.Workloads {
		for _, m := range w.objects {
			svc, ok := m.obj.(*v1.Service)
			if !ok {
				continue
			}
			ns := svc.Namespace
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			var sel labels.Selector
			if len(svc.Spec.Selector) > 0 {
				sel = labels.SelectorFromSet(svc.Spec.Selector)
			}
			out[ns+"/"+svc.Name] = sel
		}
	}
	return out
}

// workloadKeys names the scenario's Deployments, StatefulSets and
// DaemonSets, whose readiness ends the setup.
func (s *Scenario) workloadKeys() []workloadKey {
	var out []workloadKey
	for _, w := range s.Workloads {
		for _, m := range w.objects {
			var kind string
			switch m.obj.(type) {
			case *appsv1.Deployment:
				kind = "Deployment"
			case *appsv1.StatefulSet:
				kind = "StatefulSet"
			case *appsv1.DaemonSet:
				kind = "DaemonSet"
			default:
				continue
			}
			o, err := meta.Accessor(m.obj)
			if err != nil {
				continue
			}
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			out = append(out, workloadKey{kind: kind, key: ns + "/" + o.GetName()})
		}
	}
	return out
}

// podSpec returns the pod template's spec of the workload kinds.
func podSpec(obj runtime.Object) *v1.PodSpec {
	switch o := obj.(type) {
	case *v1.Pod:
		return &o.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *appsv1.ReplicaSet:
		return &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.Spec
	}
	return nil
}
