package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// wholeSeconds refuses a duration that a setting can only take in whole
// seconds (BENCH_TOLERATION becomes a toleration's tolerationSeconds),
// rather than truncating it silently: 1500ms would run as 1s, 500ms as 0
// (evicted at once).
func wholeSeconds(name string, d time.Duration) error {
	if d%time.Second != 0 {
		return fmt.Errorf("%s=%v: want whole seconds (it becomes tolerationSeconds), e.g. 2s; unset it for the default", name, d)
	}
	return nil
}

func TestWholeSeconds(t *testing.T) {
	for _, tc := range []struct {
		d       time.Duration
		wantErr string
	}{
		{2 * time.Second, ""},
		{time.Minute, ""},
		{1500 * time.Millisecond, "BENCH_TOLERATION=1.5s: want whole seconds"},
		{500 * time.Millisecond, "BENCH_TOLERATION=500ms: want whole seconds"},
	} {
		err := wholeSeconds("BENCH_TOLERATION", tc.d)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("wholeSeconds(%v): %v, want error %q", tc.d, err, tc.wantErr)
		}
	}
}
