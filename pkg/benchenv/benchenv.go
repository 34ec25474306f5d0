// Package benchenv reads the benchmarks' settings (test/bench) from BENCH_*
// variables. A value that does not parse is refused, naming the variable and
// what it takes: a typo that silently ran the defaults would put the wrong
// figures in docs/benchmarks.md. It lives outside test/ so that `make test`
// runs its tests and `make fuzz` its fuzz target.
package benchenv

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Names are every BENCH_* variable test/bench reads (TestNamesAreThoseRead
// keeps the list true to its sources).
var Names = []string{
	"BENCH_APISERVER_ARGS", "BENCH_APISERVER_GOMEMLIMIT", "BENCH_CONCURRENT", "BENCH_CREATE_RATE", "BENCH_GRACE", "BENCH_MOVE_BEFORE_EVICT", "BENCH_NODES", "BENCH_PODS",
	"BENCH_PODS_PER_NODE", "BENCH_PREEMPTORS", "BENCH_PROFILE_DIR", "BENCH_QPS", "BENCH_RACK", "BENCH_SATURATE", "BENCH_SICK", "BENCH_SPARE",
	"BENCH_TIMELINE", "BENCH_TOLERATION", "BENCH_TRIALS", "BENCH_WINDOW", "BENCH_WORKLOADS",
}

// CheckNames refuses a BENCH_* variable of the environment that no
// benchmark reads: a misspelt name (BENCH_NODE=5000) would run the default
// as silently as a malformed value. test/bench's TestMain calls it.
func CheckNames(environ []string) error {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "BENCH_") && !slices.Contains(Names, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: no benchmark reads it (a typo?); the settings are %s", strings.Join(unknown, ", "), strings.Join(Names, ", "))
	}
	return nil
}

// Int reads a positive integer; unset or empty means def.
func Int(tb testing.TB, name string, def int) int {
	tb.Helper()
	v, err := parseInt(name, os.Getenv(name), def)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// Duration reads a positive duration (Go syntax: 90s, 2m); unset or empty
// means def.
func Duration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v, err := parseDuration(name, os.Getenv(name), def)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// Bool reads a boolean (1, true, 0, false, as strconv.ParseBool); unset or
// empty means false.
func Bool(tb testing.TB, name string) bool {
	tb.Helper()
	v, err := parseBool(name, os.Getenv(name))
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func parseBool(name, value string) (bool, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(value)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 or 0 (true or false); unset it for false", name, value)
	}
	return v, nil
}

// List reads a comma-separated list of some of allowed; unset or empty
// means all of them.
func List(tb testing.TB, name string, allowed []string) []string {
	tb.Helper()
	v, err := parseList(name, os.Getenv(name), allowed)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func parseInt(name, value string, def int) (int, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return def, nil
	}
	v, err := strconv.Atoi(value)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer (default %d); unset it for the default", name, value, def)
	}
	return v, nil
}

func parseDuration(name, value string, def time.Duration) (time.Duration, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return def, nil
	}
	v, err := time.ParseDuration(value)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 90s or 2m (default %v); unset it for the default", name, value, def)
	}
	return v, nil
}

func parseList(name, value string, allowed []string) ([]string, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return slices.Clone(allowed), nil
	}
	var out []string
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if !slices.Contains(allowed, item) {
			return nil, fmt.Errorf("%s=%q: %q is not one of %s", name, value, item, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	return out, nil
}
