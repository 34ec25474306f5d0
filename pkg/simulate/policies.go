package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	fieldpath "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// PolicyEntry is an entry of `remediationPolicies:`: a RemediationPolicy
// (nodeshepherd.io/v1alpha1, docs/remediation.md) inline, or {file: PATH}
// naming a YAML file (relative to the scenario) with one or more.
type PolicyEntry struct {
	node     *yaml.Node
	policies []policyDoc
}

// policyDoc is one decoded policy and where it was written.
type policyDoc struct {
	policy rem.RemediationPolicy
	node   *yaml.Node // its mapping, to point later errors at their lines
	path   string     // the file it is in
}

func (d *policyDoc) src() string { return fmt.Sprintf("%s:%d", d.path, d.node.Line) }

// UnmarshalYAML keeps the node; loadPolicies decodes it once the scenario's
// path is known.
func (p *PolicyEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return configfile.LineError(n, "remediationPolicies: expected a RemediationPolicy (apiVersion: %s, kind: %s, metadata, spec) or {file: PATH}", rem.Group+"/"+rem.Version, rem.Kind)
	}
	p.node = n
	return nil
}

// hasPolicies says whether the scenario carries remediation policies:
// nodeshepherd's run then installs the CRD, creates them and runs the
// remediation controller (and drain) with the fake cloud provider.
func (s *Scenario) hasPolicies() bool { return len(s.RemediationPolicies) > 0 }

// PolicyCount is the number of remediation policies the scenario creates.
func (s *Scenario) PolicyCount() int { return len(s.policies()) }

// policies are the scenario's policies, in order.
func (s *Scenario) policies() []*policyDoc {
	var out []*policyDoc
	for i := range s.RemediationPolicies {
		for j := range s.RemediationPolicies[i].policies {
			out = append(out, &s.RemediationPolicies[i].policies[j])
		}
	}
	return out
}

// hasRepairSteps says whether a policy reboots or replaces machines.
func (s *Scenario) hasRepairSteps() bool {
	for _, d := range s.allPolicies() {
		for _, st := range d.policy.Spec.Steps {
			if st.Action == rem.ActionReboot || st.Action == rem.ActionReplace {
				return true
			}
		}
	}
	return false
}

// allPolicies are the scenario's policies and the versions its apply-policy
// steps give them.
func (s *Scenario) allPolicies() []*policyDoc {
	out := s.policies()
	for i := range s.Timeline {
		if p := s.Timeline[i].Policy; p != nil && s.Timeline[i].Action == ActionApplyPolicy {
			for j := range p.policies {
				out = append(out, &p.policies[j])
			}
		}
	}
	return out
}

// loadStepPolicies decodes the policy: of each apply-policy step, as an
// entry of remediationPolicies is decoded: one policy, and the name of one
// of remediationPolicies (the step edits it).
func (s *Scenario) loadStepPolicies(timeline *yaml.Node) []string {
	var errs []string
	var names []string
	for _, d := range s.policies() {
		names = append(names, d.policy.Name)
	}
	for i := range s.Timeline {
		st := &s.Timeline[i]
		if st.Action != ActionApplyPolicy {
			continue
		}
		where := item(timeline, i)
		label := fmt.Sprintf("timeline[%d] (apply-policy)", i)
		if st.Policy == nil {
			line := 1
			if where != nil {
				line = where.Line
			}
			errs = append(errs, fmt.Sprintf("%s:%d: %s: give policy: the policy's new version, a RemediationPolicy inline or {file: PATH}", s.path, line, label))
			continue
		}
		e := PolicyEntry{node: st.Policy.node}
		var docs []policyDoc
		var derrs []string
		if f := field(e.node, "file"); f != nil {
			if len(e.node.Content) != 2 {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: {file: PATH} takes nothing else", s.path, e.node.Line, label))
				continue
			}
			path := filepath.Join(filepath.Dir(s.path), f.Value)
			nodes, err := readPolicyFile(path)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: %v", s.path, f.Line, label, err))
				continue
			}
			if len(nodes) != 1 {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: %s holds %d RemediationPolicies; apply-policy takes one", s.path, f.Line, label, path, len(nodes)))
				continue
			}
			d, de := decodePolicy(nodes[0], path, fmt.Sprintf("%s (%s)", label, f.Value))
			docs, derrs = append(docs, d), de
		} else {
			d, de := decodePolicy(e.node, s.path, label+": policy")
			docs, derrs = append(docs, d), de
		}
		errs = append(errs, derrs...)
		if len(derrs) > 0 {
			continue
		}
		if name := docs[0].policy.Name; !slices.Contains(names, name) {
			errs = append(errs, fmt.Sprintf("%s: %s: RemediationPolicy %q is not one of the scenario's remediationPolicies (%s): apply-policy edits one of them",
				docs[0].src(), label, name, strings.Join(names, ", ")))
			continue
		}
		st.Policy.policies = docs
	}
	return errs
}

// hasFenceSteps says whether a policy fences machines (powers them off).
func (s *Scenario) hasFenceSteps() bool {
	for _, d := range s.allPolicies() {
		for _, st := range d.policy.Spec.Steps {
			if st.Action == rem.ActionFence {
				return true
			}
		}
	}
	return false
}

// loadPolicies decodes every entry of remediationPolicies and checks each
// policy as the API server and the controller would: every error names its
// file and line.
func (s *Scenario) loadPolicies() []string {
	var errs []string
	names := map[string]string{}
	for i := range s.RemediationPolicies {
		e := &s.RemediationPolicies[i]
		e.policies = nil
		label := fmt.Sprintf("remediationPolicies[%d]", i)
		if f := field(e.node, "file"); f != nil {
			if len(e.node.Content) != 2 {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: {file: PATH} takes nothing else", s.path, e.node.Line, label))
				continue
			}
			path := filepath.Join(filepath.Dir(s.path), f.Value)
			docs, err := readPolicyFile(path)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: %v", s.path, f.Line, label, err))
				continue
			}
			if len(docs) == 0 {
				errs = append(errs, fmt.Sprintf("%s:%d: %s: %s holds no RemediationPolicy", s.path, f.Line, label, path))
			}
			for j, n := range docs {
				d, derrs := decodePolicy(n, path, fmt.Sprintf("%s (%s, document %d)", label, f.Value, j+1))
				errs = append(errs, derrs...)
				if len(derrs) == 0 {
					e.policies = append(e.policies, d)
				}
			}
			continue
		}
		d, derrs := decodePolicy(e.node, s.path, label)
		errs = append(errs, derrs...)
		if len(derrs) == 0 {
			e.policies = append(e.policies, d)
		}
	}
	for _, d := range s.policies() {
		name := d.policy.Name
		if prev, dup := names[name]; dup {
			errs = append(errs, fmt.Sprintf("%s: RemediationPolicy %q is already defined at %s: names are unique", d.src(), name, prev))
		}
		names[name] = d.src()
	}
	return errs
}

// readPolicyFile returns the mapping of every document of a YAML file.
func readPolicyFile(path string) ([]*yaml.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*yaml.Node
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue
		}
		if doc.Content[0].Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s:%d: expected a RemediationPolicy", path, doc.Content[0].Line)
		}
		out = append(out, doc.Content[0])
	}
}

// policyAPIVersion is the apiVersion of a RemediationPolicy.
var policyAPIVersion = rem.Group + "/" + rem.Version

// decodePolicy reads one policy strictly: unknown fields and values of the
// wrong kind are refused at their lines, then the policy is validated as
// the API server and the controller validate it (PolicySpec.Validate),
// each error at the line of the field it names.
func decodePolicy(n *yaml.Node, path, label string) (policyDoc, []string) {
	var errs []string
	at := func(node *yaml.Node, format string, args ...any) {
		if node == nil {
			node = n
		}
		errs = append(errs, fmt.Sprintf("%s:%d: %s: %s", path, node.Line, label, fmt.Sprintf(format, args...)))
	}
	checkFields(n, reflect.TypeFor[rem.RemediationPolicy](), "", at)
	if len(errs) > 0 {
		return policyDoc{}, errs
	}
	var doc policyDoc
	var raw any
	if err := n.Decode(&raw); err != nil {
		at(nil, "%v", err)
		return doc, errs
	}
	data, err := json.Marshal(raw)
	if err == nil {
		err = json.Unmarshal(data, &doc.policy)
	}
	if err != nil {
		at(nil, "%v", err)
		return doc, errs
	}
	doc.node, doc.path = n, path
	p := &doc.policy
	if p.APIVersion != policyAPIVersion {
		at(field(n, "apiVersion"), "apiVersion %q: a RemediationPolicy is %s", p.APIVersion, policyAPIVersion)
	}
	if p.Kind != rem.Kind {
		at(field(n, "kind"), "kind %q: remediationPolicies take kind %s (workloads: takes the other manifests)", p.Kind, rem.Kind)
	}
	if p.Name == "" {
		at(key(n, "metadata"), "metadata.name is missing")
	} else if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 {
		at(field(field(n, "metadata"), "name"), "metadata.name %q: %s", p.Name, strings.Join(msgs, "; "))
	}
	if field(n, "spec") == nil {
		at(nil, "spec is missing: give unhealthy, healthyHold and steps (docs/remediation.md)")
		return doc, errs
	}
	for _, e := range p.Spec.Validate(fieldpath.NewPath("spec")) {
		at(locate(n, e.Field), "%s", e.Error())
	}
	return doc, errs
}

var (
	durationType  = reflect.TypeFor[metav1.Duration]()
	timeType      = reflect.TypeFor[metav1.Time]()
	intstrType    = reflect.TypeFor[intstr.IntOrString]()
	objectMeta    = reflect.TypeFor[metav1.ObjectMeta]()
	policyStatus  = reflect.TypeFor[rem.PolicyStatus]()
	metadataNames = []string{"name", "labels", "annotations"}
)

// checkFields walks a YAML node along the Go type it decodes into (by the
// type's JSON names) and reports, at their lines, the keys the type lacks
// and values of the wrong kind: an unquoted True is a boolean to YAML, not
// the string a condition status is.
func checkFields(n *yaml.Node, typ reflect.Type, path string, at func(*yaml.Node, string, ...any)) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias // *anchor: the anchored value
	}
	if n == nil || n.Tag == "!!null" {
		return
	}
	name := path
	if name == "" {
		name = "the policy"
	}
	switch {
	case typ == durationType:
		if _, err := time.ParseDuration(n.Value); n.Kind != yaml.ScalarNode || err != nil {
			at(n, "%s: invalid duration %q: write a number with a unit, e.g. 45s, 5m or 1h30m", name, n.Value)
		}
		return
	case typ == intstrType:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!str" {
			at(n, "%s: write a number of nodes (2) or a percentage (\"20%%\")", name)
		}
		return
	case typ == timeType:
		if n.Kind != yaml.ScalarNode {
			at(n, "%s: expected a time (RFC 3339)", name)
		}
		return
	case typ == policyStatus:
		at(n, "%s: the remediation controller writes the status; leave it out", name)
		return
	}
	switch typ.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			at(n, "%s: expected a mapping", name)
			return
		}
		fields := jsonFields(typ)
		var known []string
		for k, ft := range fields {
			if ft != policyStatus {
				known = append(known, k)
			}
		}
		if typ == objectMeta {
			known = metadataNames
		}
		sort.Strings(known)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			ft, ok := fields[key.Value]
			if typ == objectMeta && !slices.Contains(metadataNames, key.Value) {
				ok = false
			}
			if !ok {
				at(key, "%s: unknown field %q; %s takes %s", join(path, key.Value), key.Value, name, strings.Join(known, ", "))
				continue
			}
			checkFields(val, ft, join(path, key.Value), at)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			at(n, "%s: expected a mapping", name)
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkFields(n.Content[i+1], typ.Elem(), path+"["+n.Content[i].Value+"]", at)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			at(n, "%s: expected a list", name)
			return
		}
		for i, item := range n.Content {
			checkFields(item, typ.Elem(), fmt.Sprintf("%s[%d]", path, i), at)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			at(n, "%s: expected a string, got %s: quote it, e.g. %q", name, yamlKind(n), n.Value)
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			at(n, "%s: expected true or false, got %s", name, yamlKind(n))
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			at(n, "%s: expected a whole number, got %s", name, yamlKind(n))
		}
	}
}

// jsonFields are a struct type's fields by JSON name, inline ones flattened.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case name == "" && (f.Anonymous || strings.Contains(opts, "inline")):
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
		case name != "":
			out[name] = f.Type
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// key returns the key node of key in a mapping node, or nil: where a
// missing part of its value is to be written.
func key(n *yaml.Node, k string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return n.Content[i]
		}
	}
	return nil
}

// yamlKind names what YAML read a value as.
func yamlKind(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!bool":
		return "a boolean (" + n.Value + ")"
	case n.Tag == "!!int" || n.Tag == "!!float":
		return "a number (" + n.Value + ")"
	}
	return "a " + strings.TrimPrefix(n.Tag, "!!") + " (" + n.Value + ")"
}

// locate is the node a field path (spec.steps[1].timeout) names in a
// policy's mapping, or the deepest part of it that exists.
func locate(n *yaml.Node, path string) *yaml.Node {
	cur := n
	for _, part := range strings.Split(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		next := field(cur, name)
		if next == nil {
			return cur
		}
		cur = next
		for rest != "" {
			var key string
			key, rest, _ = strings.Cut(rest, "]")
			rest = strings.TrimPrefix(rest, "[")
			switch cur.Kind {
			case yaml.SequenceNode:
				i, err := strconv.Atoi(key)
				if err != nil || i < 0 || i >= len(cur.Content) {
					return cur
				}
				cur = cur.Content[i]
			case yaml.MappingNode:
				next := field(cur, key)
				if next == nil {
					return cur
				}
				cur = next
			default:
				return cur
			}
		}
	}
	return cur
}

// scaledPolicy is the policy with every duration divided by scale (rounded
// to the nanosecond, so that a limit scale gives the limit exactly).
func scaledPolicy(p rem.RemediationPolicy, scale float64) rem.RemediationPolicy {
	var out rem.RemediationPolicy
	data, _ := json.Marshal(p)
	_ = json.Unmarshal(data, &out) // a deep copy
	div := func(d *metav1.Duration) {
		if d != nil {
			d.Duration = time.Duration(math.Round(float64(d.Duration) / scale))
		}
	}
	s := &out.Spec
	for i := range s.Unhealthy {
		div(&s.Unhealthy[i].For)
		div(s.Unhealthy[i].StaleAfter)
	}
	div(&s.HealthyHold)
	for i := range s.Steps {
		div(&s.Steps[i].Timeout)
	}
	div(&s.Brakes.Cooldown)
	return out
}

// maxPolicyScale is the largest time scale at which the policy is still
// valid: every step's timeout, divided by it, must stay at least
// rem.MinStepTimeout and at least the divided hold time plus a second (the
// precision of the API server's timestamps does not shrink).
func maxPolicyScale(p *rem.PolicySpec) float64 {
	limit := math.Inf(1)
	for _, st := range p.Steps {
		limit = math.Min(limit, float64(st.Timeout.Duration)/float64(rem.MinStepTimeout))
		limit = math.Min(limit, float64(st.Timeout.Duration-p.HealthyHold.Duration)/float64(time.Second))
	}
	return limit
}

// checkPolicyScale refuses a time scale at which a policy's divided
// durations are no longer valid, naming the policy and the largest scale.
func (s *Scenario) checkPolicyScale(scale float64) error {
	var errs []string
	for _, d := range s.allPolicies() {
		scaled := scaledPolicy(d.policy, scale)
		fe := scaled.Spec.Validate(fieldpath.NewPath("spec"))
		if len(fe) == 0 {
			continue
		}
		errs = append(errs, fmt.Sprintf("%s:%d: --time-scale %g: RemediationPolicy %s divided by it is no longer valid (%s): every step's timeout must stay at least %v and at least healthyHold plus a second of real time; it allows --time-scale %s at most, or lengthen the timeouts",
			d.path, locate(d.node, fe[0].Field).Line, scale, d.policy.Name, fe[0].Error(), rem.MinStepTimeout, formatScale(maxPolicyScale(&d.policy.Spec))))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

func formatScale(f float64) string {
	return strconv.FormatFloat(math.Floor(f*100)/100, 'f', -1, 64)
}

// crdServedTimeout bounds the wait for the RemediationPolicy resource.
const crdServedTimeout = time.Minute

// withRemediationCRD installs the RemediationPolicy CRD and waits until its
// resource is served before the controllers start: the remediation
// controller lists policies from its first moment.
func withRemediationCRD(run func(context.Context, *rest.Config) error) func(context.Context, *rest.Config) error {
	return func(ctx context.Context, rc *rest.Config) error {
		if err := installRemediationCRD(ctx, rest.CopyConfig(rc)); err != nil {
			return err
		}
		return run(ctx, rc)
	}
}

func installRemediationCRD(ctx context.Context, rc *rest.Config) error {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	return rem.InstallCRD(ctx, dyn, fieldManager, crdServedTimeout)
}

// fieldManager is simulate's own writes'.
const fieldManager = "nodeshepherd-simulate"

// policyObjects are the policies as created, durations divided by scale.
func (s *Scenario) policyObjects(scale float64) ([]*unstructured.Unstructured, []string, error) {
	var objs []*unstructured.Unstructured
	var srcs []string
	for _, d := range s.policies() {
		p := scaledPolicy(d.policy, scale)
		p.APIVersion, p.Kind = policyAPIVersion, rem.Kind
		data, err := json.Marshal(p)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", d.src(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", d.src(), err)
		}
		unstructured.RemoveNestedField(u.Object, "status") // the controller's
		objs, srcs = append(objs, u), append(srcs, d.src())
	}
	return objs, srcs, nil
}

// createPolicies creates the scenario's policies once their resource is
// served (the controllers' start installs the CRD), durations divided by
// the time scale. Only nodeshepherd's run has them: upstream has no
// remediation controller to read them.
func (r *runner) createPolicies(ctx context.Context) error {
	if !r.sc.hasPolicies() || r.opts.Mode != ModeNodeShepherd {
		return nil
	}
	objs, srcs, err := r.sc.policyObjects(r.opts.TimeScale)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(r.cluster.RESTConfig())
	if err != nil {
		return err
	}
	res := dyn.Resource(rem.GroupVersionResource)
	done := 0
	var createErr error
	if err := r.waitFor(ctx, "RemediationPolicies created", func() (string, bool) {
		for done < len(objs) {
			_, err := res.Create(ctx, objs[done], metav1.CreateOptions{FieldManager: fieldManager})
			switch {
			case err == nil:
				done++
			case apierrors.IsNotFound(err):
				return "the RemediationPolicy resource is not served yet", false
			default:
				createErr = fmt.Errorf("%s: creating RemediationPolicy %s: %w", srcs[done], objs[done].GetName(), err)
				return createErr.Error(), true
			}
		}
		return fmt.Sprintf("%d RemediationPolicies created", done), true
	}); err != nil {
		return err
	}
	return createErr
}

// applyTimeout bounds an apply-policy step's update (real time): conflicts
// with the controller's status writes are retried until then.
const applyTimeout = 30 * time.Second

// applyPolicy carries out an apply-policy step: the named policy gets the
// step's spec, labels and annotations (durations divided by the time
// scale), retrying conflicts with the controller's status writes. The
// upstream run has no policies: the step does nothing there.
func (r *runner) applyPolicy(ctx context.Context, st *Step) error {
	if r.opts.Mode != ModeNodeShepherd || st.Policy == nil || len(st.Policy.policies) != 1 {
		return nil
	}
	d := st.Policy.policies[0]
	p := scaledPolicy(d.policy, r.opts.TimeScale)
	var spec map[string]any
	data, err := json.Marshal(p.Spec)
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", d.src(), err)
	}
	dyn, err := dynamic.NewForConfig(r.cluster.RESTConfig())
	if err != nil {
		return err
	}
	res := dyn.Resource(rem.GroupVersionResource)
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	for {
		u, err := res.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%s: reading RemediationPolicy %s: %w", d.src(), p.Name, err)
		}
		u.Object["spec"] = spec
		u.SetLabels(p.Labels)
		u.SetAnnotations(p.Annotations)
		_, err = res.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
		switch {
		case err == nil:
			return nil
		case !apierrors.IsConflict(err):
			return fmt.Errorf("%s: updating RemediationPolicy %s: %w", d.src(), p.Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: updating RemediationPolicy %s: %w", d.src(), p.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
