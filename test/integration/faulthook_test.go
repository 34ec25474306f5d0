package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/faulthook"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestReleaseBinaryHasNoFaultHook: the binary `make build` makes has no
// fault hook in it (its symbols; the tests' faulthook build has them, which
// shows the check can see them), and refuses faulthook.Env with exit code 2
// and a message that says why, before it touches any cluster.
func TestReleaseBinaryHasNoFaultHook(t *testing.T) {
	const hookSymbol = "/pkg/faulthook.armed" // the armed fault: only in the faulthook build
	for _, b := range []struct {
		name, path string
		want       bool
	}{{"release", framework.Binary(t), false}, {"faulthook", framework.FaultBinary(t), true}} {
		out, err := framework.Command("go", "tool", "nm", b.path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool nm %s: %v: %s", b.path, err, out)
		}
		if got := bytes.Contains(out, []byte(hookSymbol)); got != b.want {
			t.Errorf("%s binary: symbol %s present %v, want %v", b.name, hookSymbol, got, b.want)
		}
	}

	cmd := framework.Command(framework.Binary(t), "run", "--kubeconfig=/nonexistent")
	cmd.Env = append(os.Environ(), faulthook.Env+"=hang:drain")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("release binary with %s set: %v, want exit code 2; stderr:\n%s", faulthook.Env, err, stderr.String())
	}
	for _, want := range []string{faulthook.Env + `="hang:drain"`, "built without fault hooks", "unset " + faulthook.Env} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}
