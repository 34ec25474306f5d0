package cli

import (
	"errors"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	cases := map[error]int{
		nil:                                    0,
		errors.New("connection refused"):       1,
		Usagef("--nodes must be at least 1"):   2,
		fmt.Errorf("wrapped: %w", Usagef("x")): 2,
		errors.New(`unknown command "x" for "nodeshepherd"`): 2,
	}
	for err, want := range cases {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, want)
		}
	}
}
