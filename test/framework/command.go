package framework

import (
	"context"
	"os/exec"

	"github.com/nodeshepherd/nodeshepherd/pkg/childproc"
)

// Command is exec.Command for tests: the process dies with the test binary
// (childproc.DieWithParent). A test binary killed at its timeout runs no
// cleanup, and a `nodeshepherd run`, simulate or fakenodes left behind would
// eat CPU in the next run. Tests start every process with it or
// CommandContext (childproc's TestTestsStartProcessesThroughTheFramework).
func Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	childproc.DieWithParent(cmd)
	return cmd
}

// CommandContext is exec.CommandContext, its process tied to the test
// binary as Command's.
func CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	childproc.DieWithParent(cmd)
	return cmd
}
