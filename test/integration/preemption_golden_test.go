package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// kube-scheduler's preemption decisions are recorded once (make
// golden-preemption) instead of starting kube-scheduler for every situation
// in every test run: they only change with the situations or the
// kube-scheduler version, and both are named in the file.
var updatePreemptionGolden = flag.Bool("update-preemption-golden", false,
	"run kube-scheduler on every preemption situation and rewrite "+preemptionGoldenPath+" (make golden-preemption)")

const preemptionGoldenPath = "testdata/preemption-kube-scheduler.json"

// preemptionGolden is the file's content.
type preemptionGolden struct {
	Comment       string              `json:"comment"`
	KubeScheduler string              `json:"kubeScheduler"` // k8s.io/kubernetes version of hack/controlplane
	InputsSHA256  string              `json:"inputsSHA256"`  // of situationInputs()
	Decisions     []preemptionOutcome `json:"decisions"`
}

type preemptionOutcome struct {
	Situation string   `json:"situation"`
	Node      int      `json:"node"` // 1-based; 0: the preemptor stayed pending
	Victims   []string `json:"victims"`
	Message   string   `json:"message,omitempty"`
}

func (g *preemptionGolden) outcome(name string) outcome {
	for _, d := range g.Decisions {
		if d.Situation == name {
			return outcome{node: d.Node, victims: d.Victims, msg: d.Message}
		}
	}
	panic("no recorded decision for " + name) // loadPreemptionGolden checked the set
}

// situationInputs is what kube-scheduler sees of each situation: the node
// count and taint, the pods and PDBs exactly as created (against nodes named
// node-1, node-2, ...), and the preemptor. Its hash says whether the file
// still matches the situations.
func situationInputs() []byte {
	type input struct {
		Name      string
		Nodes     int
		NodeCPU   string
		TaintNode int
		Pods      []*v1.Pod
		Guarded   []string
		Preemptor *v1.Pod
		Classes   map[string]int32
	}
	var all []input
	for _, s := range situations {
		nodes := make([]string, s.nodes)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("node-%d", i+1)
		}
		in := input{Name: s.name, Nodes: s.nodes, NodeCPU: preemptionNodeCPU, TaintNode: s.taintNode, Guarded: s.guarded,
			Preemptor: s.preemptor.pod(nodes, v1.DefaultSchedulerName), Classes: priorityClasses}
		for _, p := range s.pods {
			in.Pods = append(in.Pods, p.pod(nodes, v1.DefaultSchedulerName))
		}
		all = append(all, in)
	}
	data, err := json.Marshal(all)
	if err != nil {
		panic(err)
	}
	return data
}

func inputsHash() string {
	sum := sha256.Sum256(situationInputs())
	return hex.EncodeToString(sum[:])
}

// kubeSchedulerVersion is the k8s.io/kubernetes version the control plane
// is built from (hack/controlplane/go.mod).
func kubeSchedulerVersion(t *testing.T) string {
	t.Helper()
	path := filepath.Join(framework.RepoRoot(t), "hack", "controlplane", "go.mod")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" {
			return fields[1]
		}
	}
	t.Fatalf("%s requires no k8s.io/kubernetes version", path)
	return ""
}

const refreshHint = "run `make golden-preemption` (starts kube-scheduler on every situation, a few minutes) and commit " + preemptionGoldenPath

// loadPreemptionGolden reads the recorded decisions and fails the test when
// they are missing or do not match the situations or the control plane.
func loadPreemptionGolden(t *testing.T) *preemptionGolden {
	t.Helper()
	data, err := os.ReadFile(preemptionGoldenPath)
	if err != nil {
		t.Fatalf("kube-scheduler's recorded decisions: %v; %s", err, refreshHint)
	}
	var g preemptionGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v; %s", preemptionGoldenPath, err, refreshHint)
	}
	if h := inputsHash(); g.InputsSHA256 != h {
		t.Fatalf("%s is stale: the preemption situations changed since it was recorded (inputs sha256 %s, recorded %s); %s",
			preemptionGoldenPath, h, g.InputsSHA256, refreshHint)
	}
	if v := kubeSchedulerVersion(t); g.KubeScheduler != v {
		t.Fatalf("%s was recorded with kube-scheduler %s, the control plane is %s; %s", preemptionGoldenPath, g.KubeScheduler, v, refreshHint)
	}
	var recorded, want []string
	for _, d := range g.Decisions {
		recorded = append(recorded, d.Situation)
	}
	for _, s := range situations {
		want = append(want, s.name)
	}
	if !slices.Equal(recorded, want) {
		t.Fatalf("%s records situations %q, the test has %q; %s", preemptionGoldenPath, recorded, want, refreshHint)
	}
	t.Logf("kube-scheduler %s's decisions from %s (inputs sha256 %s)", g.KubeScheduler, preemptionGoldenPath, g.InputsSHA256)
	return &g
}

// recordKubeScheduler runs every situation with kube-scheduler, each on a
// fresh control plane, and writes the file.
func recordKubeScheduler(t *testing.T) *preemptionGolden {
	t.Helper()
	g := &preemptionGolden{
		Comment:       "kube-scheduler's preemption decisions for the situations of preemption_test.go; written by `make golden-preemption`, do not edit",
		KubeScheduler: kubeSchedulerVersion(t),
		InputsSHA256:  inputsHash(),
		Decisions:     make([]preemptionOutcome, len(situations)),
	}
	var mu sync.Mutex
	t.Run("kube-scheduler", func(t *testing.T) {
		for i, s := range situations {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				got := runSituation(t, s, true)
				s.check(t, "kube-scheduler", got)
				mu.Lock()
				g.Decisions[i] = preemptionOutcome{Situation: s.name, Node: got.node, Victims: got.victims, Message: got.msg}
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		t.Fatalf("kube-scheduler's run failed; %s left as it was", preemptionGoldenPath)
	}
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(preemptionGoldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(preemptionGoldenPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: kube-scheduler %s, %d situations", preemptionGoldenPath, g.KubeScheduler, len(g.Decisions))
	return g
}
