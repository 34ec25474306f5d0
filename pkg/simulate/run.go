package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
)

// Run modes.
const (
	ModeNodeShepherd = RunNodeShepherd // nodeshepherd's controllers and scheduler
	ModeUpstream     = RunUpstream     // kube-controller-manager's controllers and kube-scheduler
)

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission
// plugin gives pods for not-ready and unreachable.
const defaultTolerationSeconds = 300

// podCIDR is the cluster CIDR both runs allocate node pod CIDRs from.
const podCIDR = "10.244.0.0/16"

// Options says how to run a scenario.
type Options struct {
	Mode      string
	TimeScale float64
	// Dir holds the control plane's files and logs of this run.
	Dir    string
	BinDir string
	// Out gets progress lines.
	Out io.Writer
	// SetupTimeout bounds getting nodes and workloads ready (real time).
	SetupTimeout time.Duration
	// Trial numbers the run among repeated trials (0: the only one).
	Trial int
	// Chaos, when set, adds a random fault schedule and runs the checker.
	Chaos *ChaosOptions
	// NodeKind is what runs the nodes, fake or hollow ("": the scenario's
	// cluster.nodeKind, fake by default).
	NodeKind string
	// KubeletVerbosity is the hollow kubelets' -v (their logs are under
	// Dir); fake nodes have no kubelet log.
	KubeletVerbosity int
}

// Mark is a timeline step as it happened.
type Mark struct {
	T     float64  `json:"t"` // cluster seconds
	Text  string   `json:"text"`
	Nodes []string `json:"nodes,omitempty"`
}

// RunResult is what one run measured, in cluster time.
type RunResult struct {
	Mode         string              `json:"mode"`
	Trial        int                 `json:"trial"` // 1-based
	Components   string              `json:"components"`
	Measures     map[string]*float64 `json:"measures"`
	Expectations []Checked           `json:"expectations"`
	Samples      []Sample            `json:"samples"`
	Marks        []Mark              `json:"marks"`
	Zones        []string            `json:"zones"`
	Nodes        int                 `json:"nodes"`
	// NodeKind is hollow for a run on kubemark's hollow nodes (empty on
	// fake nodes, as before node kinds).
	NodeKind     string   `json:"nodeKind,omitempty"`
	Pods         int      `json:"podsAtStart"`
	Services     []string `json:"services,omitempty"` // namespace/name, whose endpoints are counted
	Interrupted  bool     `json:"interrupted,omitempty"`
	SetupSeconds float64  `json:"setupSeconds"`
	// Settings are the timings and limits the run had, in cluster time;
	// SettingsChecked says what of them was read back from the running
	// components.
	Settings        []Setting `json:"settings"`
	SettingsChecked string    `json:"settingsChecked,omitempty"`
	LogDir          string    `json:"logDir"`
	// Checker is what pkg/chaos's checker found (--chaos-seed).
	Checker *CheckerResult `json:"checker,omitempty"`
}

// Checked is an expectation with its outcome.
type Checked struct {
	Expectation string   `json:"expectation"`
	Metric      string   `json:"metric"`
	Value       *float64 `json:"value"`
	Passed      bool     `json:"passed"`
}

// Failed counts the expectations that did not hold.
func (r *RunResult) Failed() int {
	n := 0
	for _, c := range r.Expectations {
		if !c.Passed {
			n++
		}
	}
	return n
}

// nodeSet is what the runner asks of its nodes, fake or hollow.
type nodeSet interface {
	NodeNames() []string
	Zone(name string) string
	Group(name string) string
}

// runner is one run of a scenario.
type runner struct {
	sc     *Scenario
	opts   Options
	out    io.Writer
	client kubernetes.Interface
	// nodes are the run's nodes: fake (the manager fake) or hollow.
	nodes  nodeSet
	fake   *fakenode.Manager
	hollow *hollownode.Fleet
	// cluster is this run's local cluster; client and nodes are its.
	cluster *localcluster.Cluster
	rec     *recorder
	start   time.Time // real time the timeline started
	chaos   *chaosRun // with --chaos-seed
}

// Execute runs the scenario once. An interrupted run (ctx cancelled once the
// timeline started) still returns what it recorded.
func Execute(ctx context.Context, sc *Scenario, opts Options) (*RunResult, error) {
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.SetupTimeout == 0 {
		opts.SetupTimeout = 5 * time.Minute
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.NodeKind == "" {
		opts.NodeKind = sc.NodeKind()
	}
	if err := sc.CheckNodes(opts.NodeKind, opts.TimeScale); err != nil {
		return nil, err
	}
	if opts.NodeKind == NodeKindHollow && opts.Chaos != nil {
		return nil, errors.New("--chaos-seed on hollow nodes is not implemented: the schedule's ready-flap sets Ready, which the real kubelet writes again, and the checker's ground truth has not been run against hollow nodes")
	}
	r := &runner{sc: sc, opts: opts, out: opts.Out, rec: newRecorder(time.Now)}
	return r.run(ctx)
}

func (r *runner) printf(format string, args ...any) {
	label := r.opts.Mode
	if r.opts.Trial > 0 {
		label += fmt.Sprintf(" #%d", r.opts.Trial)
	}
	fmt.Fprintf(r.out, "[%s] "+format+"\n", append([]any{label}, args...)...)
}

// clusterSince is the cluster time since the timeline started.
func (r *runner) clusterSince(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(r.start)) * r.opts.TimeScale)
}

// real turns cluster time into real time.
func (r *runner) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.opts.TimeScale)
}

// run brings a fresh local cluster up, sets the scenario's workloads up on
// it, runs the timeline and measures.
func (r *runner) run(ctx context.Context) (*RunResult, error) {
	res := &RunResult{Mode: r.opts.Mode, Trial: max(r.opts.Trial, 1), LogDir: r.opts.Dir + "/logs"}
	cfg, err := r.clusterConfig(res)
	if err != nil {
		return nil, err
	}
	setupStart := time.Now()
	r.printf("starting etcd, kube-apiserver and kube-controller-manager%s ...", map[bool]string{true: " and kube-scheduler"}[cfg.ControlPlane.Scheduler])
	if r.cluster, err = localcluster.Start(ctx, cfg); err != nil {
		return nil, err
	}
	defer r.cluster.Stop()
	r.client = r.cluster.Client()
	if f := r.cluster.Hollow(); f != nil {
		r.hollow, r.nodes = f, hollowNodes{f}
		res.NodeKind = NodeKindHollow
		res.Components += "; nodes: kubemark's hollow nodes (the real kubelet code)"
	} else {
		r.fake = r.cluster.Nodes()
		r.nodes = r.fake
	}
	if sc := cfg.ControlPlane.SchedulerConfig; sc != nil {
		if err := r.checkScheduler(ctx, *sc, res); err != nil {
			return nil, err
		}
	}
	if v, err := r.client.Discovery().ServerVersion(); err == nil && r.opts.Mode == ModeUpstream {
		res.Components += " " + v.GitVersion
	}
	ctx, cancel := context.WithCancel(ctx)
	factory, services := r.watch(ctx, res)
	// Before the cluster stops: the informers end first.
	defer func() { cancel(); factory.Shutdown() }()
	if err := r.setUp(ctx, factory, services); err != nil {
		return nil, err
	}
	if r.opts.Chaos != nil {
		if err := r.startChaos(ctx, res); err != nil {
			return nil, err
		}
	}
	if r.hollow != nil {
		if err := r.hollowPhase(ctx); err != nil {
			return nil, err
		}
	}
	r.startTimeline(res, factory, setupStart)
	res.Marks, res.Samples, res.Interrupted, err = r.timeline(ctx)
	if err != nil {
		return nil, err
	}
	if r.chaos != nil {
		r.chaos.finish()
	}
	r.evaluate(res)
	return res, nil
}

// watch starts the informers the recorder measures from, Services included.
func (r *runner) watch(ctx context.Context, res *RunResult) (informers.SharedInformerFactory, map[string]labels.Selector) {
	factory := informers.NewSharedInformerFactory(r.client, 0)
	services := r.sc.services()
	for k := range services {
		res.Services = append(res.Services, k)
	}
	sort.Strings(res.Services)
	r.rec.watchServices(res.Services)
	r.rec.expectWorkloads(r.sc.workloadKeys())
	if r.sc.hasPolicies() {
		r.rec.trackRepairs()
	}
	r.rec.watch(factory)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return factory, services
}

// setUp waits for the nodes, creates the workloads and waits for them,
// within the setup timeout.
func (r *runner) setUp(ctx context.Context, f informers.SharedInformerFactory, services map[string]labels.Selector) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.SetupTimeout)
	defer cancel()
	if err := r.waitNodes(ctx); err != nil {
		return err
	}
	// Policies before workloads: the controller judges the nodes as the
	// workloads start on them, and nothing is unhealthy yet.
	if err := r.createPolicies(ctx); err != nil {
		return err
	}
	if err := r.applyWorkloads(ctx, r.cluster.RESTConfig()); err != nil {
		return err
	}
	return r.waitWorkloads(ctx, f, services)
}

// startTimeline records the cluster as set up and starts the clock of the
// timeline.
func (r *runner) startTimeline(res *RunResult, f informers.SharedInformerFactory, setupStart time.Time) {
	res.SetupSeconds = time.Since(setupStart).Seconds()
	res.Nodes = len(r.nodes.NodeNames())
	pods, _ := f.Core().V1().Pods().Lister().List(labels.Everything())
	res.Pods = len(pods)
	r.start = time.Now()
	r.rec.start()
	r.printf("setup done in %s: %d nodes, %d pods Ready; timeline of %v starts (time scale %g: %v real)",
		time.Since(setupStart).Round(100*time.Millisecond), res.Nodes, res.Pods, r.sc.Duration.Duration, r.opts.TimeScale,
		r.real(r.sc.Duration.Duration).Round(100*time.Millisecond))
}

// evaluate turns what was recorded into measures in cluster time and checks
// the expectations of this run's mode.
func (r *runner) evaluate(res *RunResult) {
	measures := r.rec.finish(r.start.Add(r.real(r.recoveryAt())))
	for name, v := range measures {
		if v != nil && measure(name).Kind == kindDuration {
			*v *= r.opts.TimeScale
		}
	}
	res.Measures = measures
	res.Zones = r.rec.zones()
	for i := range r.sc.Expect {
		e := &r.sc.Expect[i]
		if !e.appliesTo(r.opts.Mode) {
			continue
		}
		v := measures[e.Metric]
		res.Expectations = append(res.Expectations, Checked{Expectation: e.String(), Metric: e.Metric, Value: v, Passed: e.holds(v)})
	}
}

// recoveryAt is when the last fault ends, in cluster time from the start.
func (r *runner) recoveryAt() time.Duration {
	var end time.Duration
	for _, st := range r.sc.Timeline {
		if st.Action != ActionBurst && st.Action != ActionApplyPolicy {
			end = max(end, st.End())
		}
	}
	return end
}

// waitWorkloads waits until every workload has its replicas Ready and every
// Service of the scenario lists each of its Ready pods as a ready endpoint,
// so that the endpoint measures start from the full count.
func (r *runner) waitWorkloads(ctx context.Context, f informers.SharedInformerFactory, services map[string]labels.Selector) error {
	return r.waitFor(ctx, "workloads Ready", func() (string, bool) {
		pods, _ := f.Core().V1().Pods().Lister().List(labels.Everything())
		ready := 0
		want := map[string]int{}
		for _, p := range pods {
			if !kube.PodReady(p) {
				continue
			}
			ready++
			for k, sel := range services {
				if sel != nil && strings.HasPrefix(k, p.Namespace+"/") && sel.Matches(labels.Set(p.Labels)) && p.DeletionTimestamp == nil {
					// A Ready pod whose IP is not posted yet (a hollow
					// kubelet posts it later) will be an endpoint: wait
					// for it, or the timeline starts short of endpoints.
					want[k]++
				}
			}
		}
		status := fmt.Sprintf("%d/%d pods Ready", ready, len(pods))
		got := r.rec.readyEndpoints()
		endpointsDone := true
		for k, sel := range services {
			if sel != nil && got[k] != want[k] {
				endpointsDone = false
			}
		}
		if len(services) > 0 {
			status += fmt.Sprintf(", %d/%d Service endpoints ready", sumValues(got), sumValues(want))
		}
		return status, r.rec.workloads() && endpointsDone
	})
}

// applyWorkloads creates the scenario's manifests in order, creating
// namespaces they name.
func (r *runner) applyWorkloads(ctx context.Context, cfg *rest.Config) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(r.client.Discovery()))
	namespaces := map[string]bool{}
	manifests := r.sc.manifests(r.opts.TimeScale)
	for _, m := range manifests {
		gvk := m.obj.GetObjectKind().GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", m.src, gvk.Kind, err)
		}
		data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m.obj)
		if err != nil {
			return fmt.Errorf("%s: %w", m.src, err)
		}
		u := &unstructured.Unstructured{Object: data}
		u.SetAPIVersion(gvk.GroupVersion().String())
		u.SetKind(gvk.Kind)
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := u.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
				u.SetNamespace(ns)
			}
			if !namespaces[ns] && ns != metav1.NamespaceDefault {
				_, err := r.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("%s: creating namespace %s: %w", m.src, ns, err)
				}
			}
			namespaces[ns] = true
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{FieldManager: "nodeshepherd-simulate"}); err != nil {
			return fmt.Errorf("%s: creating %s %s: %w", m.src, gvk.Kind, u.GetName(), err)
		}
	}
	r.printf("created %d workload objects", len(manifests))
	return nil
}

// timeline runs the steps at their times, samples the state for the charts
// and prints progress, until the scenario's duration or ctx ends.
func (r *runner) timeline(ctx context.Context) (marks []Mark, samples []Sample, interrupted bool, err error) {
	steps := slices.Clone(r.sc.Timeline)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At.Duration < steps[j].At.Duration })
	total := r.sc.Duration.Duration
	// About 400 samples per run, at most 20 a second.
	sampleEvery := max(r.real(total)/400, 50*time.Millisecond)
	progressEvery := max(r.real(total)/20, 2*time.Second)
	sampleTick := time.NewTicker(sampleEvery)
	defer sampleTick.Stop()
	progressTick := time.NewTicker(progressEvery)
	defer progressTick.Stop()
	end := time.NewTimer(r.real(total))
	defer end.Stop()
	next := 0
	stepTimer := time.NewTimer(0)
	defer stepTimer.Stop()
	samples = append(samples, r.rec.sample(0))
	for {
		select {
		case <-ctx.Done():
			r.printf("interrupted at %v: reporting what was recorded so far", r.clusterSince(time.Now()).Round(time.Second))
			return marks, samples, true, nil
		case err := <-r.cluster.Failed():
			return nil, nil, false, err
		case <-end.C:
			samples = append(samples, r.rec.sample(r.clusterSince(time.Now()).Seconds()))
			r.progress()
			return marks, samples, false, nil
		case <-sampleTick.C:
			samples = append(samples, r.rec.sample(r.clusterSince(time.Now()).Seconds()))
		case <-progressTick.C:
			r.progress()
		case <-stepTimer.C:
			for next < len(steps) && r.clusterSince(time.Now()) >= steps[next].At.Duration {
				st := &steps[next]
				next++
				applied := time.Now()
				nodes, err := r.do(ctx, st)
				if r.chaos != nil {
					r.chaos.record(st, nodes, applied, time.Now())
				}
				if err != nil {
					return nil, nil, false, fmt.Errorf("timeline step %q at %v: %w", st.String(), st.At.Duration, err)
				}
				marks = append(marks, Mark{T: st.At.Duration.Seconds(), Text: st.String(), Nodes: nodes})
				r.printf("t=%-7s ▶ %s%s", fmtDuration(st.At.Duration), st.String(), nodeList(nodes))
			}
			if next < len(steps) {
				stepTimer.Reset(max(r.real(steps[next].At.Duration)-time.Since(r.start), 0))
			}
		}
	}
}

func nodeList(nodes []string) string {
	switch {
	case len(nodes) == 0:
		return ""
	case len(nodes) <= 3:
		return " (" + strings.Join(nodes, ", ") + ")"
	}
	return fmt.Sprintf(" (%d nodes: %s, ...)", len(nodes), strings.Join(nodes[:2], ", "))
}

// progress prints one status line.
func (r *runner) progress() {
	t := r.clusterSince(time.Now())
	s := r.rec.sample(t.Seconds())
	ready, notReady := 0, 0
	for _, z := range r.rec.zones() {
		ready += s.ZoneReady[z]
		notReady += s.ZoneNotReady[z]
	}
	repairs := ""
	if r.sc.hasPolicies() {
		repairs = fmt.Sprintf(" · in repair %d · repaired %d · rebooted %d · replaced %d", s.InRepair, s.RepairsDone, s.Rebooted, s.Replaced)
	}
	r.printf("t=%-7s nodes Ready %d NotReady %d · NoExecute %d · cordoned %d · pods Ready %d NotReady %d Pending %d · evicted %d · preempted %d · drained %d%s",
		fmtDuration(t), ready, notReady, s.NoExecute, s.Cordoned, s.PodsReady, s.PodsNotReady, s.PodsPending, s.Evicted, s.Preempted, s.DrainEvicted, repairs)
}

// resolve turns a step's target into node names.
func (r *runner) resolve(t Target) []string {
	var names []string
	switch {
	case len(t.Nodes) > 0:
		names = slices.Clone(t.Nodes)
	default:
		names = r.nodes.NodeNames()
	}
	if t.Zone != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return r.nodes.Zone(n) != t.Zone })
	}
	if t.Group != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return r.nodes.Group(n) != t.Group })
	}
	if t.Count > 0 && t.Count < len(names) {
		names = names[:t.Count]
	}
	return names
}

// do executes one step and returns the nodes it touched.
func (r *runner) do(ctx context.Context, st *Step) ([]string, error) {
	if st.Action == ActionApplyPolicy {
		return nil, r.applyPolicy(ctx, st)
	}
	r.rec.fault()
	if st.Action == ActionBurst {
		return nil, r.burst(ctx, st.Burst)
	}
	nodes := r.resolve(st.Target)
	fault := func(a fakenode.Action, d time.Duration) error {
		_, err := r.fake.Apply(ctx, fakenode.Fault{Action: a, Target: fakenode.Target{Nodes: nodes}, Condition: st.cond, Duration: d})
		return err
	}
	d := r.real(st.For.Duration)
	if r.hollow != nil && st.Action != ActionCordon && st.Action != ActionUncordon {
		return nodes, r.doHollow(ctx, st, nodes, d)
	}
	switch st.Action {
	case ActionPartition, ActionNetworkBlip:
		return nodes, fault(fakenode.Partition, d)
	case ActionHeal:
		return nodes, fault(fakenode.Heal, 0)
	case ActionKubeletStop:
		return nodes, fault(fakenode.KubeletStop, d)
	case ActionKubeletStart:
		return nodes, fault(fakenode.KubeletStart, 0)
	case ActionKubeletRestart:
		if d > 0 {
			return nodes, fault(fakenode.KubeletStop, d)
		}
		if err := fault(fakenode.KubeletStop, 0); err != nil {
			return nodes, err
		}
		return nodes, fault(fakenode.KubeletStart, 0)
	case ActionSetCondition:
		return nodes, fault(fakenode.SetCondition, d)
	case ActionClearCondition:
		return nodes, fault(fakenode.ClearCondition, 0)
	case ActionMachineShutdown:
		return nodes, fault(fakenode.MachineShutdown, d)
	case ActionMachineStart:
		return nodes, fault(fakenode.MachineStart, 0)
	case ActionMachineDelete:
		return nodes, fault(fakenode.MachineDelete, 0)
	case ActionCordon, ActionUncordon:
		if err := r.cordon(ctx, nodes, st.Action == ActionCordon); err != nil {
			return nodes, err
		}
		if st.Action == ActionCordon && d > 0 {
			time.AfterFunc(d, func() { _ = r.cordon(ctx, nodes, false) })
		}
		return nodes, nil
	}
	return nil, fmt.Errorf("unknown action %q", st.Action)
}

// cordon sets spec.unschedulable as kubectl cordon does.
func (r *runner) cordon(ctx context.Context, nodes []string, on bool) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on))
	var errs []error
	for _, n := range nodes {
		_, err := r.client.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-cordon"})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// burst creates a Deployment of pods that need the burst's resources.
func (r *runner) burst(ctx context.Context, b *Burst) error {
	labels := map[string]string{"app": b.Name, burstLabel: b.Name}
	req := v1.ResourceList{}
	if !b.CPU.IsZero() {
		req[v1.ResourceCPU] = b.CPU.Quantity
	}
	if !b.Memory.IsZero() {
		req[v1.ResourceMemory] = b.Memory.Quantity
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: metav1.NamespaceDefault, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(b.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{PriorityClassName: b.PriorityClassName, Containers: []v1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: req},
				}}},
			},
		},
	}
	_, err := r.client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, dep, metav1.CreateOptions{})
	return err
}

// fmtDuration prints a cluster duration compactly: 45s, 5m0s, 1h2m3s.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return "+" + d.Round(time.Second).String()
}
