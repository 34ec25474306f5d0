package controlplane

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestBackoffSecondsAreWholeAndAtLeastOne(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0: 1, 100 * time.Millisecond: 1, 499 * time.Millisecond: 1, time.Second: 1, 1499 * time.Millisecond: 1,
		1500 * time.Millisecond: 2, 3333 * time.Millisecond: 3, 10 * time.Second: 10, 5 * time.Minute: 300,
	} {
		if got := BackoffSeconds(d); got != want {
			t.Errorf("BackoffSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestSchedulerConfigFile(t *testing.T) {
	c := &SchedulerConfig{QPS: 50, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 3, PodMaxInUnschedulablePodsDuration: 30 * time.Second}
	var got struct {
		APIVersion       string `yaml:"apiVersion"`
		Kind             string `yaml:"kind"`
		ClientConnection struct {
			Kubeconfig string  `yaml:"kubeconfig"`
			QPS        float32 `yaml:"qps"`
			Burst      int32   `yaml:"burst"`
		} `yaml:"clientConnection"`
		LeaderElection struct {
			LeaderElect *bool `yaml:"leaderElect"`
		} `yaml:"leaderElection"`
		EnableProfiling          *bool `yaml:"enableProfiling"`
		PodInitialBackoffSeconds int64 `yaml:"podInitialBackoffSeconds"`
		PodMaxBackoffSeconds     int64 `yaml:"podMaxBackoffSeconds"`
	}
	dec := yaml.NewDecoder(strings.NewReader(schedulerConfigYAML(c, `/d/a "b"/scheduler.kubeconfig`)))
	dec.KnownFields(true)
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != "kubescheduler.config.k8s.io/v1" || got.Kind != "KubeSchedulerConfiguration" {
		t.Errorf("type %s %s", got.APIVersion, got.Kind)
	}
	cc := got.ClientConnection
	if cc.Kubeconfig != `/d/a "b"/scheduler.kubeconfig` || cc.QPS != 50 || cc.Burst != 100 {
		t.Errorf("clientConnection %+v", cc)
	}
	if got.LeaderElection.LeaderElect == nil || *got.LeaderElection.LeaderElect || got.EnableProfiling == nil || *got.EnableProfiling {
		t.Error("leader election or profiling not off")
	}
	if got.PodInitialBackoffSeconds != 1 || got.PodMaxBackoffSeconds != 3 {
		t.Errorf("backoffs %d, %d", got.PodInitialBackoffSeconds, got.PodMaxBackoffSeconds)
	}

	l := layout{Dir: "/d", SchedulerPort: 5, PKI: &pki{}}
	args := append(withoutIgnoredByConfig(schedulerArgs(l)), schedulerConfigArgs(l, c)...)
	for _, want := range []string{"--config=/d/kube-scheduler.yaml", "--pod-max-in-unschedulable-pods-duration=30s", "--secure-port=5",
		"--authentication-kubeconfig=/d/scheduler.kubeconfig", "--leader-elect=false"} {
		if !has(args, want) {
			t.Errorf("kube-scheduler args lack %s: %v", want, args)
		}
	}
	for _, a := range args {
		// kube-scheduler ignores these next to --config: the file has them.
		if strings.HasPrefix(a, "--kubeconfig=") || strings.HasPrefix(a, "--profiling=") {
			t.Errorf("kube-scheduler args keep %s", a)
		}
	}
	c.PodMaxInUnschedulablePodsDuration = 0
	if a := schedulerConfigArgs(l, c); len(a) != 1 {
		t.Errorf("without a duration the flag stays at kube-scheduler's default: %v", a)
	}

	// Every node scored and dry-run for preemption: the profile's args.
	c.PercentageOfNodesToScore, c.MinCandidateNodesPercentage = 100, 100
	var all struct {
		PercentageOfNodesToScore int32 `yaml:"percentageOfNodesToScore"`
		Profiles                 []struct {
			SchedulerName string `yaml:"schedulerName"`
			PluginConfig  []struct {
				Name string `yaml:"name"`
				Args struct {
					MinCandidateNodesPercentage int32 `yaml:"minCandidateNodesPercentage"`
					MinCandidateNodesAbsolute   int32 `yaml:"minCandidateNodesAbsolute"`
				} `yaml:"args"`
			} `yaml:"pluginConfig"`
		} `yaml:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(schedulerConfigYAML(c, "/k")), &all); err != nil {
		t.Fatal(err)
	}
	if all.PercentageOfNodesToScore != 100 || len(all.Profiles) != 1 || all.Profiles[0].SchedulerName != "default-scheduler" ||
		len(all.Profiles[0].PluginConfig) != 1 || all.Profiles[0].PluginConfig[0].Name != "DefaultPreemption" ||
		all.Profiles[0].PluginConfig[0].Args.MinCandidateNodesPercentage != 100 || all.Profiles[0].PluginConfig[0].Args.MinCandidateNodesAbsolute != 100 {
		t.Errorf("every-node settings: %+v", all)
	}
}

func TestSchedulerConfigValidate(t *testing.T) {
	good := SchedulerConfig{QPS: 50, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]SchedulerConfig{
		"whole seconds":    {QPS: 50, Burst: 100, PodInitialBackoffSeconds: 0, PodMaxBackoffSeconds: 1},
		"max not below it": {QPS: 50, Burst: 100, PodInitialBackoffSeconds: 2, PodMaxBackoffSeconds: 1},
		"QPS must be":      {QPS: 0, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 1},
		"must not be negative": {QPS: 50, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 1,
			PodMaxInUnschedulablePodsDuration: -time.Second},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: error %v, want one saying %q", c, err, name)
		}
	}
}

// The /configz of kube-scheduler v1.37.1 (cut down) as the control plane reads it.
func TestParseSchedulerConfigz(t *testing.T) {
	body := `{"componentconfig":{"kind":"KubeSchedulerConfiguration","apiVersion":"kubescheduler.config.k8s.io/v1","parallelism":16,
"clientConnection":{"kubeconfig":"/d/scheduler.kubeconfig","contentType":"application/vnd.kubernetes.protobuf","qps":33,"burst":77},
"enableProfiling":false,"percentageOfNodesToScore":0,"podInitialBackoffSeconds":2,"podMaxBackoffSeconds":3,"profiles":[]}}`
	got, err := parseSchedulerConfigz([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := (SchedulerConfig{QPS: 33, Burst: 77, PodInitialBackoffSeconds: 2, PodMaxBackoffSeconds: 3}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := parseSchedulerConfigz([]byte(`{}`)); err == nil {
		t.Error("a /configz without componentconfig parsed")
	}
}

func TestGetNamesAComponentNotRunning(t *testing.T) {
	cp := &ControlPlane{cfg: Config{ControllerManager: true}}
	if _, err := cp.Get(context.Background(), Scheduler, "/metrics"); err == nil || !strings.Contains(err.Error(), "kube-scheduler is not running") {
		t.Errorf("Get = %v", err)
	}
	if _, err := cp.SchedulerConfigz(context.Background()); err == nil || !strings.Contains(err.Error(), "kube-scheduler is not running") {
		t.Errorf("SchedulerConfigz = %v", err)
	}
}
