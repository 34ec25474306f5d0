package controllerutil

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseLimit turns a count ("10") or a percentage ("45%") into a count out
// of total; percentages round down. It is how budgets and incident guards
// are written on the command line.
func ParseLimit(s string, total int) (int, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v >= 0 && v <= 100) { // written so that NaN is refused too
			return 0, fmt.Errorf("%q is not a percentage between 0%% and 100%%", s)
		}
		return int(v * float64(total) / 100), nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is neither a count (e.g. 10) nor a percentage (e.g. 45%%)", s)
	}
	return v, nil
}

// Finite says whether v is a number, neither NaN nor ±Inf: flags parsed
// with strconv accept "NaN" and "Inf", which no rate or fraction means.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
