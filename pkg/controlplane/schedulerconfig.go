package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// SchedulerConfig is what a caller sets of kube-scheduler's configuration.
// Start writes it as a KubeSchedulerConfiguration file
// (kubescheduler.config.k8s.io/v1) and passes it with --config; fields it
// does not name keep kube-scheduler's defaults.
type SchedulerConfig struct {
	// QPS and Burst limit kube-scheduler's client (clientConnection).
	QPS   float32
	Burst int32
	// PodInitialBackoffSeconds and PodMaxBackoffSeconds are kube-scheduler's
	// backoffs: whole seconds, at least 1, the maximum not below the initial.
	PodInitialBackoffSeconds int64
	PodMaxBackoffSeconds     int64
	// PodMaxInUnschedulablePodsDuration (0: kube-scheduler's 5m) is not part
	// of the file format; it goes in the deprecated flag
	// --pod-max-in-unschedulable-pods-duration, which kube-scheduler v1.37
	// still applies next to --config.
	PodMaxInUnschedulablePodsDuration time.Duration
	// PercentageOfNodesToScore (0: kube-scheduler's adaptive default) and
	// MinCandidateNodesPercentage (0: DefaultPreemption's 10) make the
	// default-scheduler profile look at every node, for comparisons whose
	// outcome must not depend on which share of a large cluster was tried.
	PercentageOfNodesToScore    int32
	MinCandidateNodesPercentage int32
	// Profiles are more profiles after default-scheduler, each serving its
	// own schedulerName, for comparing a plugin's settings.
	Profiles []SchedulerProfile
}

// SchedulerProfile is a profile of kube-scheduler's default plugins under
// a schedulerName of its own.
type SchedulerProfile struct {
	SchedulerName string
	// NodeResourcesFit are NodeResourcesFit's args (the fields of
	// NodeResourcesFitArgs, as JSON values); nil: its defaults.
	NodeResourcesFit map[string]any
}

// schedulerConfigFile is the configuration file's name in the control plane's
// directory.
const schedulerConfigFile = "kube-scheduler.yaml"

// Validate rejects what kube-scheduler would refuse at start-up, before
// anything starts.
func (c *SchedulerConfig) Validate() error {
	var errs []error
	if c.QPS <= 0 || c.Burst < 1 {
		errs = append(errs, fmt.Errorf("kube-scheduler client QPS must be positive and burst at least 1, got %g and %d", c.QPS, c.Burst))
	}
	if c.PodInitialBackoffSeconds < 1 || c.PodMaxBackoffSeconds < c.PodInitialBackoffSeconds {
		errs = append(errs, fmt.Errorf("kube-scheduler backoffs are whole seconds: initial at least 1 and max not below it, got %d and %d",
			c.PodInitialBackoffSeconds, c.PodMaxBackoffSeconds))
	}
	if c.PercentageOfNodesToScore < 0 || c.PercentageOfNodesToScore > 100 || c.MinCandidateNodesPercentage < 0 || c.MinCandidateNodesPercentage > 100 {
		errs = append(errs, fmt.Errorf("kube-scheduler percentageOfNodesToScore and minCandidateNodesPercentage must be in [0, 100], got %d and %d",
			c.PercentageOfNodesToScore, c.MinCandidateNodesPercentage))
	}
	if c.PodMaxInUnschedulablePodsDuration < 0 {
		errs = append(errs, fmt.Errorf("kube-scheduler pod-max-in-unschedulable-pods-duration must not be negative, got %v", c.PodMaxInUnschedulablePodsDuration))
	}
	for i, p := range c.Profiles {
		if p.SchedulerName == "" || p.SchedulerName == "default-scheduler" {
			errs = append(errs, fmt.Errorf("kube-scheduler profile %d: a schedulerName of its own is needed, got %q", i, p.SchedulerName))
		}
	}
	return errors.Join(errs...)
}

// BackoffSeconds is d as kube-scheduler's backoff settings can hold it: the
// nearest whole second, at least 1.
func BackoffSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second/2)/time.Second), 1)
}

// schedulerConfigYAML is the configuration file. The kubeconfig is in the
// file because kube-scheduler ignores --kubeconfig (and --profiling) when
// --config is given; leader election stays off as with the flag.
func schedulerConfigYAML(c *SchedulerConfig, kubeconfig string) string {
	out := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %s
  burst: %d
leaderElection:
  leaderElect: false
enableProfiling: false
podInitialBackoffSeconds: %d
podMaxBackoffSeconds: %d
`, strconv.Quote(kubeconfig), strconv.FormatFloat(float64(c.QPS), 'g', -1, 32), c.Burst, c.PodInitialBackoffSeconds, c.PodMaxBackoffSeconds)
	if c.PercentageOfNodesToScore > 0 {
		out += fmt.Sprintf("percentageOfNodesToScore: %d\n", c.PercentageOfNodesToScore)
	}
	if c.MinCandidateNodesPercentage == 0 && len(c.Profiles) == 0 {
		return out
	}
	// Profiles replace kube-scheduler's one: default-scheduler comes first.
	type pluginConfig struct {
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	}
	type profile struct {
		SchedulerName string         `json:"schedulerName"`
		PluginConfig  []pluginConfig `json:"pluginConfig,omitempty"`
	}
	def := profile{SchedulerName: "default-scheduler"}
	if c.MinCandidateNodesPercentage > 0 {
		// Its absolute minimum (100) stays; args replace all of the defaults.
		def.PluginConfig = []pluginConfig{{Name: "DefaultPreemption",
			Args: map[string]any{"minCandidateNodesPercentage": c.MinCandidateNodesPercentage, "minCandidateNodesAbsolute": 100}}}
	}
	profiles := []profile{def}
	for _, p := range c.Profiles {
		pr := profile{SchedulerName: p.SchedulerName}
		if p.NodeResourcesFit != nil {
			pr.PluginConfig = []pluginConfig{{Name: "NodeResourcesFit", Args: p.NodeResourcesFit}}
		}
		profiles = append(profiles, pr)
	}
	b, err := yaml.Marshal(map[string]any{"profiles": profiles})
	if err != nil {
		// Only maps, strings and numbers: cannot fail.
		panic(fmt.Sprintf("kube-scheduler profiles: %v", err))
	}
	out += string(b)
	return out
}

// schedulerConfigArgs replace the flags a configuration file makes
// kube-scheduler ignore.
func schedulerConfigArgs(l layout, c *SchedulerConfig) []string {
	args := []string{"--config=" + l.path(schedulerConfigFile)}
	if c.PodMaxInUnschedulablePodsDuration > 0 {
		args = append(args, "--pod-max-in-unschedulable-pods-duration="+c.PodMaxInUnschedulablePodsDuration.String())
	}
	return args
}

// SchedulerConfigz is what a running kube-scheduler reports of the settings
// of SchedulerConfig on its /configz (its own component configuration).
func (cp *ControlPlane) SchedulerConfigz(ctx context.Context) (SchedulerConfig, error) {
	if !cp.cfg.Scheduler {
		return SchedulerConfig{}, errors.New("kube-scheduler is not running in this control plane")
	}
	body, err := cp.get(ctx, cp.layout.SchedulerPort, "/configz")
	if err != nil {
		return SchedulerConfig{}, fmt.Errorf("kube-scheduler /configz: %w", err)
	}
	return parseSchedulerConfigz(body)
}

func parseSchedulerConfigz(body []byte) (SchedulerConfig, error) {
	var z struct {
		ComponentConfig *struct {
			ClientConnection struct {
				QPS   float32 `json:"qps"`
				Burst int32   `json:"burst"`
			} `json:"clientConnection"`
			PodInitialBackoffSeconds int64 `json:"podInitialBackoffSeconds"`
			PodMaxBackoffSeconds     int64 `json:"podMaxBackoffSeconds"`
		} `json:"componentconfig"`
	}
	if err := json.Unmarshal(body, &z); err != nil {
		return SchedulerConfig{}, fmt.Errorf("kube-scheduler /configz: %w", err)
	}
	if z.ComponentConfig == nil {
		return SchedulerConfig{}, errors.New("kube-scheduler /configz has no componentconfig")
	}
	cc := z.ComponentConfig
	return SchedulerConfig{QPS: cc.ClientConnection.QPS, Burst: cc.ClientConnection.Burst,
		PodInitialBackoffSeconds: cc.PodInitialBackoffSeconds, PodMaxBackoffSeconds: cc.PodMaxBackoffSeconds}, nil
}

// Get reads a path (/metrics, /configz, ...) of a running component's
// secure port as the admin: kube-controller-manager or kube-scheduler.
func (cp *ControlPlane) Get(ctx context.Context, component, path string) ([]byte, error) {
	switch {
	case component == ControllerManager && cp.cfg.ControllerManager:
		return cp.get(ctx, cp.layout.KCMPort, path)
	case component == Scheduler && cp.cfg.Scheduler:
		return cp.get(ctx, cp.layout.SchedulerPort, path)
	}
	return nil, fmt.Errorf("%s is not running in this control plane", component)
}

// get reads an endpoint of a component's secure port as the admin.
func (cp *ControlPlane) get(ctx context.Context, port int, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cp.adminToken)
	resp, err := cp.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
