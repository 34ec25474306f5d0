package controllerutil

import (
	"strings"
	"testing"
)

// FuzzParseLimit: any --max-unhealthy-nodes / --max-cordoned-nodes value is
// a limit or an error, never a panic; a percentage never exceeds the total
// and no limit is negative.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10", "45%", "0", "100%", "0%", "-1", "101%", "1.5%", "%", "", "1e2%", "NaN%", "Inf%", "99999999999999999999"} {
		f.Add(s, 20)
	}
	f.Fuzz(func(t *testing.T, s string, total int) {
		if total < 0 || total > 1<<20 {
			return // totals are node counts
		}
		n, err := ParseLimit(s, total)
		if err != nil {
			if !strings.Contains(err.Error(), "%") && !strings.Contains(err.Error(), "count") {
				t.Errorf("error %q does not say what is expected", err)
			}
			return
		}
		if n < 0 {
			t.Errorf("ParseLimit(%q, %d) = %d, negative", s, total, n)
		}
		if strings.HasSuffix(s, "%") && n > total {
			t.Errorf("ParseLimit(%q, %d) = %d, more than the total", s, total, n)
		}
	})
}
