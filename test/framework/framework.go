// Package framework starts what integration tests need: a local control
// plane from bin/ and fake nodes, with cleanup that runs even when a test
// fails. Tests never skip for a missing binary: they fail and name the make
// target.
package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/faulthook"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
)

// Context returns a context that logs to t and ends with the test.
func Context(t testing.TB) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return ctx
}

// StartControlPlane starts a control plane that is stopped when the test ends.
// Its logs are kept and named in the failure output.
// It is the spare one of that configuration when there is one (spare.go).
func StartControlPlane(t testing.TB, cfg controlplane.Config) *controlplane.ControlPlane {
	t.Helper()
	start := time.Now()
	cp, err, ok := spare.take(t, cfg)
	if !ok {
		return StartCluster(t, localcluster.Config{ControlPlane: cfg}).ControlPlane()
	}
	if err != nil {
		t.Fatalf("starting the local control plane: %v", err)
	}
	t.Logf("local control plane ready in %s at %s", time.Since(start).Round(time.Millisecond), cp.Server())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs: %s", filepath.Join(cp.Dir(), "logs"))
			keepLogs(t, cp.Dir())
		}
		cp.Stop()
	})
	return cp
}

// StartCluster brings a local cluster up (control plane, optional in-process
// controllers, fake nodes registered) and tears it down when the test ends,
// keeping the component logs of a failed test.
func StartCluster(t testing.TB, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	if cfg.ControlPlane.Dir == "" {
		cfg.ControlPlane.Dir = t.TempDir()
	}
	start := time.Now()
	c, err := localcluster.Start(Context(t), cfg)
	if err != nil {
		t.Fatalf("starting the local cluster: %v", err)
	}
	t.Logf("local cluster ready in %s at %s", time.Since(start).Round(time.Millisecond), c.ControlPlane().Server())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs: %s", c.LogDir())
			keepLogs(t, c.Dir())
		}
		c.Stop()
	})
	return c
}

// keepLogs copies component logs out of the test's temporary directory when
// $NODESHEPHERD_TEST_LOGS names a directory, so CI can keep them.
func keepLogs(t testing.TB, dir string) {
	dest := os.Getenv("NODESHEPHERD_TEST_LOGS")
	if dest == "" {
		return
	}
	target := filepath.Join(dest, filepath.Base(t.Name()))
	if err := os.MkdirAll(target, 0o755); err == nil {
		_ = Command("cp", "-r", filepath.Join(dir, "logs"), target).Run()
	}
}

// Client returns an admin client of the control plane.
func Client(t testing.TB, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(kube.Fast(cp.RESTConfig()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartFakeNodes runs fake nodes until the test ends and returns once they are
// registered and running.
func StartFakeNodes(t testing.TB, cfg fakenode.Config) *fakenode.Manager {
	t.Helper()
	n, err := localcluster.StartNodes(Context(t), cfg, localcluster.DefaultRegisterTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n.Manager()
}

// Eventually polls cond every 100ms until it returns true, failing the test
// after timeout with cond's last description of what it saw.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	ctx := Context(t)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, state, err := cond(ctx)
		last = state
		return ok, err
	})
	if err != nil {
		t.Fatalf("%s: not reached within %s (%v); last seen: %s", what, timeout, err, last)
	}
}

// LeaseRenewTime returns the renew time of a node's Lease.
func LeaseRenewTime(ctx context.Context, c kubernetes.Interface, node string) (time.Time, error) {
	l, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}, fmt.Errorf("lease %s has no renew time", node)
	}
	return l.Spec.RenewTime.Time, nil
}

// WaitEvents waits until at least min events in namespace default match the
// field selector, and returns them with their summed counts. Events are sent
// asynchronously by the controllers' broadcasters, so they must be waited for.
func WaitEvents(t testing.TB, c kubernetes.Interface, fieldSelector string, min int32) (int32, []string) {
	t.Helper()
	var total int32
	var msgs []string
	Eventually(t, time.Minute, "events "+fieldSelector, func(ctx context.Context) (bool, string, error) {
		evs, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
		if err != nil {
			return false, "", err
		}
		total, msgs = 0, nil
		for _, e := range evs.Items {
			total += max(e.Count, 1)
			msgs = append(msgs, e.Message)
		}
		return total >= min, fmt.Sprintf("%d events", total), nil
	})
	return total, msgs
}

// WaitAllNodesReady waits until at least want nodes are Ready and carry no
// taint (the node lifecycle controller has lifted the not-ready ones).
// It lists from the watch cache: cheap with thousands of nodes.
func WaitAllNodesReady(t testing.TB, client kubernetes.Interface, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(Context(t), timeout)
	defer cancel()
	err := localcluster.WaitNodesReady(ctx, client, want, localcluster.ReadyWithoutTaints, localcluster.WaitOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("%v (within %s)", err, timeout)
	}
}

// SetUnschedulable cordons or uncordons a node as a human with kubectl would.
func SetUnschedulable(t testing.TB, client kubernetes.Interface, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if _, err := client.CoreV1().Nodes().Patch(Context(t), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

var (
	releaseBuild = &build{env: "NODESHEPHERD_TEST_BINARY"}
	faultBuild   = &build{tags: "faulthook", env: "NODESHEPHERD_TEST_FAULT_BINARY"}
)

// build is one `make build` per test binary, unless the variable env names
// a binary built that way already: hack/test-integration.sh builds both
// once for all its test processes, just before they start.
type build struct {
	tags string
	env  string
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/nodeshepherd once per test binary and returns its path,
// so that tests see the exit codes and output a user sees.
func Binary(t testing.TB) string {
	t.Helper()
	return releaseBuild.binary(t)
}

// FaultBinary is Binary with the fault hooks (the faulthook build tag), for
// the tests that break a controller through faulthook.Env; the release
// binary refuses that variable.
func FaultBinary(t testing.TB) string {
	t.Helper()
	return faultBuild.binary(t)
}

func (b *build) binary(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		if p := os.Getenv(b.env); p != "" {
			if _, err := os.Stat(p); err != nil {
				b.err = fmt.Errorf("$%s: %v", b.env, err)
			}
			b.path = p
			return
		}
		dir, err := os.MkdirTemp("", "nodeshepherd-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "nodeshepherd")
		root, err := Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			b.err = fmt.Errorf("finding the module root: %v", err)
			return
		}
		// `make build`, as the Dockerfile does: the tests run the shipped binary.
		if out, err := Command("make", "-s", "-C", strings.TrimSpace(string(root)), "build", "BIN="+dir, "GO_BUILD_TAGS="+b.tags).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building nodeshepherd: %v: %s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RunBinary runs bin (Binary's, or a link to it whose name matters, such as
// kubectl-shepherd) with args to its end and returns what a user sees: the
// exit code, stdout and stderr.
func RunBinary(t testing.TB, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return 0, out.String(), errOut.String()
}

// StartBinary starts the built binary with args, its output in a log file,
// killed when the test ends. A `run` without --secure-port gets
// --secure-port=0: tests start several on one host, where the default port
// (10261) can be taken only once; serving_test.go tests the HTTPS server.
func StartBinary(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return startBinary(t, Binary(t), nil, args)
}

// StartFaultBinary is StartBinary with FaultBinary, broken as fault says
// (faulthook.Env; the test's own environment is left alone, so that tests
// can run in parallel).
func StartFaultBinary(t testing.TB, fault string, args ...string) *exec.Cmd {
	t.Helper()
	return startBinary(t, FaultBinary(t), []string{faulthook.Env + "=" + fault}, args)
}

func startBinary(t testing.TB, bin string, env, args []string) *exec.Cmd {
	t.Helper()
	if len(args) > 0 && args[0] == "run" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--secure-port") }) {
		args = append(slices.Clone(args), "--secure-port=0")
	}
	cmd := Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "nodeshepherd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait(); logf.Close() })
	return cmd
}
