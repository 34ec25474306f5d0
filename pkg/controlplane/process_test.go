package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartProcessEnv: a component gets the environment it is given
// (APIServerEnv: kube-apiserver's GOMEMLIMIT in BenchmarkFleet) on top of
// this process's own, and its output goes to its log.
func TestStartProcessEnv(t *testing.T) {
	t.Setenv("NODESHEPHERD_INHERITED", "kept")
	dir := t.TempDir()
	p, err := startProcess("printenv", "/bin/sh", []string{"-c", `echo "limit=$GOMEMLIMIT inherited=$NODESHEPHERD_INHERITED"`},
		[]string{"GOMEMLIMIT=10GiB"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the process did not end within a minute")
	}
	out, err := os.ReadFile(filepath.Join(dir, "printenv.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "limit=10GiB inherited=kept" {
		t.Errorf("the process saw %q, want GOMEMLIMIT=10GiB and the inherited variable", got)
	}
}
