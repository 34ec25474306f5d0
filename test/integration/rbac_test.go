package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// serviceAccountScenarios are the integration tests that run again as
// deploy/'s ServiceAccount: together they exercise every controller's
// reads and writes, and leader election.
var serviceAccountScenarios = []string{
	"TestNodeFailureEvictionAndRecovery", // nodelifecycle + tainteviction: taints, pod NotReady, eviction
	"TestReadinessRestored",              // nodelifecycle: pod readiness restored
	"TestTwoReplicasOneLeader",           // leader election on a Lease in nodeshepherd-system
	"TestNodeIPAMReuseExhaustionAndRestart",
	"TestMachineDeletedNodeRemovedAndPodsReplaced", // cloudnodelifecycle: node deletion
	"TestMachineShutdownTaint",                     // cloudnodelifecycle: shutdown taint
	"TestDrainCordonDrainUncordon",                 // drain: cordon, condition, Eviction API, uncordon
	"TestDrainBlockedByPDBExplainedThenForced",     // drain: PDB reads, blocked-since annotation, force-after pod deletion
	"TestSchedulerPreemption",                      // scheduler: binding, status, preemption, PDBs
}

// TestControllersRunAsServiceAccount runs those tests with
// NODESHEPHERD_TEST_CREDENTIALS=serviceaccount: deploy/ is applied with
// kubectl apply --server-side -k, the controllers get a TokenRequest token
// of its ServiceAccount, and any forbidden request fails.
func TestControllersRunAsServiceAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "^("+strings.Join(serviceAccountScenarios, "|")+")$", ".")
	cmd.Env = append(os.Environ(), framework.CredentialsEnv+"=serviceaccount")
	logPath := filepath.Join(t.TempDir(), "scenarios.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Run()
	logFile.Close()
	data, _ := os.ReadFile(logPath)
	out := bytes.NewBuffer(data)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "--- ") || strings.Contains(line, "forbade") || strings.Contains(line, "_test.go:") && !strings.Contains(line, "running the controllers as") || strings.Contains(line, "  GET ") ||
			strings.Contains(line, "  POST ") || strings.Contains(line, "  PATCH ") || strings.Contains(line, "  PUT ") || strings.Contains(line, "  DELETE ") {
			t.Log(line)
		}
	}
	if err != nil {
		t.Fatalf("the scenarios failed as the ServiceAccount: %v\n%s", err, tail(out.String(), 60))
	}
	for _, name := range serviceAccountScenarios {
		if !strings.Contains(out.String(), "--- PASS: "+name) {
			t.Errorf("%s did not pass", name)
		}
	}
	if n := strings.Count(out.String(), "running the controllers as system:serviceaccount:nodeshepherd-system:nodeshepherd"); n < len(serviceAccountScenarios) {
		t.Errorf("only %d controller starts ran as the ServiceAccount", n)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestDeployRolesHaveNoWildcards renders deploy/ and each overlay and checks
// every Role and ClusterRole rule names its API groups, resources and verbs.
func TestDeployRolesHaveNoWildcards(t *testing.T) {
	root := framework.RepoRoot(t)
	dirs := []string{filepath.Join(root, "deploy")}
	overlays, _ := filepath.Glob(filepath.Join(root, "deploy", "overlays", "*"))
	dirs = append(dirs, overlays...)
	for _, dir := range dirs {
		out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		dec := yaml.NewDecoder(bytes.NewReader(out))
		roles := 0
		clusterRoles := map[string]bool{}
		for {
			var doc struct {
				Kind     string                `yaml:"kind"`
				Metadata struct{ Name string } `yaml:"metadata"`
				Rules    []struct {
					APIGroups       []string `yaml:"apiGroups"`
					Resources       []string `yaml:"resources"`
					Verbs           []string `yaml:"verbs"`
					ResourceNames   []string `yaml:"resourceNames"`
					NonResourceURLs []string `yaml:"nonResourceURLs"`
				} `yaml:"rules"`
			}
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatal(err)
			}
			if doc.Kind != "ClusterRole" && doc.Kind != "Role" {
				continue
			}
			roles++
			if doc.Kind == "ClusterRole" {
				clusterRoles[doc.Metadata.Name] = true
			}
			for i, r := range doc.Rules {
				for field, values := range map[string][]string{"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs, "resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs} {
					if slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, "*") }) {
						t.Errorf("%s: %s %s rule %d has a wildcard in %s: %v", filepath.Base(dir), doc.Kind, doc.Metadata.Name, i, field, values)
					}
				}
				if len(r.Verbs) == 0 || (len(r.Resources) == 0 && len(r.NonResourceURLs) == 0) {
					t.Errorf("%s: %s %s rule %d names no verbs or resources", filepath.Base(dir), doc.Kind, doc.Metadata.Name, i)
				}
			}
		}
		if roles == 0 {
			t.Errorf("%s renders no roles", dir)
		}
		if dir != dirs[0] {
			continue // overlays drop the roles of the controllers they leave out
		}
		for _, d := range controllers.Registry() {
			if !clusterRoles[d.ClusterRole] {
				t.Errorf("deploy/ renders no ClusterRole %s, which the registry says controller %s needs", d.ClusterRole, d.Name)
			}
		}
	}
}
