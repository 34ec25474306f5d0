package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
)

// TestMain refuses a BENCH_* variable no benchmark reads before any runs:
// a misspelt setting would otherwise measure the defaults.
func TestMain(m *testing.M) {
	if err := benchenv.CheckNames(os.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "test/bench:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
